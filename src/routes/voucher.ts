import { Hono } from "hono";
import { z } from "zod";
import { cachesFor } from "../cache/modules.ts";
import { CacheUnavailableError } from "../cache/module.ts";
import { AppError, fail, ok } from "../errors.ts";
import { requireOperator } from "../http/auth.ts";
import { Id, v } from "../http/validate.ts";
import { insertVoucher, loadVouchersOfShop, shopExists } from "../services/shops.ts";
import { createSeckillVoucher } from "../services/seckill/config.ts";
import type { AppEnv } from "../types.ts";
import type { Deps } from "../deps.ts";

/** Amounts are integer cents. */
const Cents = z.number().int().min(0).max(100_000_000);
const VoucherBody = z.object({
  shopId: Id,
  title: z.string().trim().min(1).max(255),
  subTitle: z.string().max(255).nullable().default(null),
  rules: z.string().max(1024).nullable().default(null),
  payValue: Cents,
  actualValue: Cents,
});
/** Sale window as `YYYY-MM-DDTHH:mm:ss` in the service zone, or epoch milliseconds. */
const Instant = z.union([z.number().int().positive(), z.string().min(10).max(40)]);
const SeckillBody = VoucherBody.extend({
  stock: z.number().int().min(1).max(10_000_000),
  beginTime: Instant,
  endTime: Instant,
  /** Redis stock buckets for a hot voucher (1 = a single key). */
  buckets: z.number().int().min(1).max(64).default(1),
  /** Max seckill orders per user per day across this shop's vouchers (0 = no rule). */
  shopDailyLimit: z.number().int().min(0).max(1000).default(0),
});

/** Parses a local `YYYY-MM-DDTHH:mm:ss` in `zone` (or an ISO string with offset, or epoch ms). */
export function parseInstant(value: string | number, zone: string): number | null {
  if (typeof value === "number") return value;
  if (/[zZ]|[+-]\d\d:?\d\d$/.test(value)) {
    const t = Date.parse(value);
    return Number.isNaN(t) ? null : t;
  }
  const m = /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2}))?$/.exec(value);
  if (!m) return null;
  const asUtc = Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]), Number(m[4]), Number(m[5]), Number(m[6] ?? 0));
  // Offset of `zone` at that instant: format the UTC guess in the zone and measure the difference.
  const parts = new Intl.DateTimeFormat("en-US", { timeZone: zone, hourCycle: "h23", year: "numeric", month: "numeric", day: "numeric", hour: "numeric", minute: "numeric", second: "numeric" }).formatToParts(new Date(asUtc));
  const get = (t: string) => Number(parts.find((p) => p.type === t)?.value);
  const zoned = Date.UTC(get("year"), get("month") - 1, get("day"), get("hour"), get("minute"), get("second"));
  return asUtc - (zoned - asUtc);
}

async function refreshVoucherList(deps: Deps, shopId: number): Promise<void> {
  await cachesFor(deps).vouchers.set(deps, shopId, await loadVouchersOfShop(deps, shopId));
}

export const voucher = new Hono<AppEnv>()
  .get("/list/:shopId", v("param", z.object({ shopId: Id })), async (c) => {
    const deps = c.get("deps");
    try {
      return c.json(ok((await cachesFor(deps).vouchers.get(deps, c.req.valid("param").shopId)) ?? []));
    } catch (err) {
      if (err instanceof CacheUnavailableError) throw new AppError("UNAVAILABLE", "vouchers temporarily unavailable", { cause: err });
      throw err;
    }
  })
  .post("/", requireOperator, v("json", VoucherBody), async (c) => {
    const deps = c.get("deps");
    const body = c.req.valid("json");
    if (!(await shopExists(deps, body.shopId))) return c.json(fail("INVALID_INPUT", "unknown shop"), 400);
    const id = await insertVoucher(deps.db, body);
    await refreshVoucherList(deps, body.shopId);
    return c.json(ok(id));
  })
  .post("/seckill", requireOperator, v("json", SeckillBody), async (c) => {
    const deps = c.get("deps");
    const body = c.req.valid("json");
    const zone = deps.config.SERVICE_TIME_ZONE;
    const beginMs = parseInstant(body.beginTime, zone);
    const endMs = parseInstant(body.endTime, zone);
    if (beginMs === null || endMs === null) return c.json(fail("INVALID_INPUT", "beginTime/endTime must be YYYY-MM-DDTHH:mm:ss"), 400);
    if (endMs <= beginMs) return c.json(fail("INVALID_INPUT", "endTime must be after beginTime"), 400);
    if (!(await shopExists(deps, body.shopId))) return c.json(fail("INVALID_INPUT", "unknown shop"), 400);
    if (body.buckets > body.stock) return c.json(fail("INVALID_INPUT", "more buckets than stock"), 400);
    const cfg = await createSeckillVoucher(deps, { ...body, beginMs, endMs, dailyLimit: body.shopDailyLimit });
    await refreshVoucherList(deps, body.shopId);
    return c.json(ok(cfg.voucherId));
  });

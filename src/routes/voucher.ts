import { Hono } from "hono";
import { z } from "zod";
import { AppError, fail, ok } from "../errors.ts";
import { requireOperator } from "../http/auth.ts";
import { BODY_LIMITS, jsonBody } from "../http/body.ts";
import { idempotentOperator } from "../http/idempotency.ts";
import { Id, JsonId, varchar } from "../http/validate.ts";
import { doc, LISTING_LIMIT_NOTE, type RouteDoc, v } from "../openapi/describe.ts";
import { NumericId, Voucher } from "../openapi/schemas.ts";
import { insertVoucher, loadVouchersOfShop, shopExists } from "../services/shops.ts";
import { CampaignRuleConflict, createSeckillVoucher } from "../services/seckill/config.ts";
import { CampaignId, checkRules, PurchaseRulesInput } from "../services/seckill/rules.ts";
import type { AppEnv } from "../types.ts";
import { servePrepared } from "../http/edge.ts";
import { parseParams } from "../http/params.ts";
import type { Deps } from "../deps.ts";
import { parseDateTime } from "../util/time.ts";

/** Amounts are integer cents (pay_value BIGINT UNSIGNED, actual_value BIGINT; bounded far below either). */
const Cents = z.number({ error: "must be a number" }).int("must be whole cents").min(0).max(100_000_000);
const VoucherFields = {
  shopId: JsonId,
  title: varchar(255).trim().min(1),
  subTitle: varchar(255).nullable().default(null),
  rules: varchar(1024).nullable().default(null),
  payValue: Cents,
  actualValue: Cents,
};
/** A voucher sells for at most what it is worth (payValue ≤ actualValue). */
const payNotAboveValue = (v: { payValue: number; actualValue: number }) => v.payValue <= v.actualValue;
const PAY_ABOVE_VALUE = { message: "payValue must not exceed actualValue", path: ["payValue"] };
const VoucherBody = z.object(VoucherFields).refine(payNotAboveValue, PAY_ABOVE_VALUE);
/** Sale window as `YYYY-MM-DDTHH:mm:ss` in the service zone (or with a `Z`/`±HH:MM` offset), or epoch milliseconds. */
const Instant = z.union([z.number().int().positive().max(Number.MAX_SAFE_INTEGER), z.string().min(10).max(40)], { error: "must be YYYY-MM-DDTHH:mm:ss or epoch milliseconds" });
const SeckillBody = z.object({
  ...VoucherFields,
  /** tb_seckill_voucher.stock INT. */
  stock: z.number().int().min(1).max(10_000_000),
  beginTime: Instant,
  endTime: Instant,
  /** Redis stock buckets for a hot voucher (1 = a single key). */
  buckets: z.number().int().min(1).max(64).default(1),
  /** Max seckill orders per user per day across this shop's vouchers (0 = no rule). */
  shopDailyLimit: z.number().int().min(0).max(1000).default(0),
  /** Purchase-limit rules `[{scope: "shop" | "campaign", limit: K, days: N}]` (services/seckill/rules.ts); none by default. */
  purchaseRules: PurchaseRulesInput.default([]),
  /** The (per-shop) campaign a campaign rule counts across; required iff there is one. */
  campaign: CampaignId.nullable().default(null),
}).refine(payNotAboveValue, PAY_ABOVE_VALUE);

/**
 * What a sale window must be. Times are kept in whole seconds (MySQL DATETIME), so Redis and MySQL
 * agree on them; the window lasts at least a second (tb_seckill_voucher CHECK end_time > begin_time)
 * and at most a year, and begins within a year of now (either side: a sale may be back-dated).
 */
const SALE_HORIZON_MS = 366 * 86_400_000;
const SALE_MIN_MS = 1_000;

export type SaleWindow = { ok: true; beginMs: number; endMs: number } | { ok: false; field: "beginTime" | "endTime"; message: string };

/** Checks a sale window (API and console forms alike); `field` names the input a refusal is about. */
export function saleWindow(begin: string | number, end: string | number, zone: string, now: number): SaleWindow {
  const toMs = (t: string | number) => (typeof t === "number" ? t : parseDateTime(t, zone));
  const b = toMs(begin);
  const e = toMs(end);
  const calendar = "beginTime/endTime must be real calendar times, YYYY-MM-DDTHH:mm:ss (or epoch ms)";
  if (b === null) return { ok: false, field: "beginTime", message: calendar };
  if (e === null) return { ok: false, field: "endTime", message: calendar };
  if (Math.abs(b - now) > SALE_HORIZON_MS) return { ok: false, field: "beginTime", message: "beginTime must be within 366 days of now" };
  // On the times as given: ≥ 1 s apart, they stay apart after truncation to whole seconds.
  if (e - b < SALE_MIN_MS) return { ok: false, field: "endTime", message: "endTime must be at least 1 second after beginTime" };
  if (e - b > SALE_HORIZON_MS) return { ok: false, field: "endTime", message: "a sale lasts at most 366 days" };
  return { ok: true, beginMs: Math.floor(b / 1000) * 1000, endMs: Math.floor(e / 1000) * 1000 };
}

const ShopIdParam = z.object({ shopId: Id });

const CREATE_SECKILL: RouteDoc = {
  tag: "operator",
  summary: "Create a seckill (flash-sale) voucher and load its stock and sale window into Redis",
  description: "`beginTime`/`endTime`: `YYYY-MM-DDTHH:mm:ss` in the service zone (or with an offset), or epoch ms; a sale lasts 1 s to 366 days and begins within 366 days of now. `buckets` splits a hot voucher's stock over Redis keys. `purchaseRules` (optional, one per scope): `{scope: \"shop\" | \"campaign\", limit: K, days: N}` = at most K orders per user across the shop's rule-carrying vouchers / the vouchers naming `campaign` (per shop) in the last N×24 h; a refused reservation answers `LIMIT_REACHED`.",
  access: "operator",
  data: NumericId,
  outcomes: ["NOT_FOUND"],
  errors: ["INVALID_INPUT"],
};

/** A voucher write is visible at once: the shop's cached list is overwritten from MySQL. */
export async function refreshVoucherList(deps: Deps, shopId: number): Promise<void> {
  await deps.isolate.caches.vouchers.set(deps, shopId, await loadVouchersOfShop(deps, shopId));
}

export const voucher = new Hono<AppEnv>()
  .get("/list/:shopId", doc({ tag: "vouchers", summary: "Vouchers of a shop on sale; seckill ones with `stock`, `beginTime`, `endTime`. Amounts in cents", description: LISTING_LIMIT_NOTE, access: "public", params: ShopIdParam, data: z.array(Voucher), errors: ["RATE_LIMITED", "UNAVAILABLE"] }, (c) => servePrepared(c, c.get("deps").isolate.caches.vouchers, parseParams(ShopIdParam, c.req.param()).shopId)))
  .post("/", requireOperator, jsonBody(BODY_LIMITS.operator), doc({ tag: "operator", summary: "Create a normal voucher", access: "operator", data: NumericId, outcomes: ["NOT_FOUND"], errors: ["INVALID_INPUT"] }, v("json", VoucherBody)), idempotentOperator(BODY_LIMITS.operator), async (c) => {
    const deps = c.get("deps");
    const body = c.req.valid("json");
    if (!(await shopExists(deps, body.shopId))) return c.json(fail("NOT_FOUND", "shop not found"));
    const id = await insertVoucher(deps.db, body);
    await refreshVoucherList(deps, body.shopId);
    return c.json(ok(id));
  })
  .post("/seckill", requireOperator, jsonBody(BODY_LIMITS.operator), doc(CREATE_SECKILL, v("json", SeckillBody)), idempotentOperator(BODY_LIMITS.operator), async (c) => {
    const deps = c.get("deps");
    const body = c.req.valid("json");
    const window = saleWindow(body.beginTime, body.endTime, deps.config.SERVICE_TIME_ZONE, deps.clock.now());
    if (!window.ok) throw new AppError("INVALID_INPUT", window.message);
    const { beginMs, endMs } = window;
    const rules = checkRules(body.purchaseRules, body.campaign, deps.config);
    if (!rules.ok) throw new AppError("INVALID_INPUT", `${rules.field}: ${rules.message}`);
    if (body.buckets > body.stock) throw new AppError("INVALID_INPUT", "more buckets than stock");
    if (!(await shopExists(deps, body.shopId))) return c.json(fail("NOT_FOUND", "shop not found"));
    let cfg: Awaited<ReturnType<typeof createSeckillVoucher>>;
    try {
      cfg = await createSeckillVoucher(deps, { ...body, beginMs, endMs, dailyLimit: body.shopDailyLimit, purchaseRules: rules.rules });
    } catch (err) {
      if (err instanceof CampaignRuleConflict) throw new AppError("INVALID_INPUT", `purchaseRules: ${err.message}`);
      throw err;
    }
    // Over any "not found" a buyer's early probe of this id left in the cache: at once here, in
    // L2, and in other isolates' L1 through the write log (cache/hot.ts).
    await deps.isolate.caches.seckill.set(deps, cfg.voucherId, cfg);
    await refreshVoucherList(deps, body.shopId);
    return c.json(ok(cfg.voucherId));
  });

import { type Context, Hono } from "hono";
import { z } from "zod";
import { AppError, fail, ok } from "../errors.ts";
import { requireOperator } from "../http/auth.ts";
import { BODY_LIMITS, jsonBody } from "../http/body.ts";
import { idempotentOperator } from "../http/idempotency.ts";
import { Id, JsonId, varchar } from "../http/validate.ts";
import { doc, LISTING_LIMIT_NOTE, type RouteDoc, v } from "../openapi/describe.ts";
import { NumericId, Voucher } from "../openapi/schemas.ts";
import { CampaignId, PurchaseRulesInput } from "../services/seckill/rules.ts";
import { createSeckill, createVoucher, type VoucherOutcome } from "../services/vouchers.ts";
import type { AppEnv } from "../types.ts";
import { servePrepared } from "../http/edge.ts";
import { parseParams } from "../http/params.ts";

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
const Instant = z.union([z.number().int().positive().max(Number.MAX_SAFE_INTEGER), z.string().min(10).max(40)], {
  error: "must be YYYY-MM-DDTHH:mm:ss or epoch milliseconds",
});
const SeckillBody = z
  .object({
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
  })
  .refine(payNotAboveValue, PAY_ABOVE_VALUE);

const ShopIdParam = z.object({ shopId: Id });

/** The service's outcome as the API answers it: the id, an unknown shop (200, `success:false`), or a 400. */
function answer(c: Context<AppEnv>, res: VoucherOutcome) {
  if (res.ok) return c.json(ok(res.voucherId));
  if (res.code === "NOT_FOUND") return c.json(fail("NOT_FOUND", res.message));
  throw new AppError("INVALID_INPUT", res.message);
}

const CREATE_SECKILL: RouteDoc = {
  tag: "operator",
  summary: "Create a seckill (flash-sale) voucher and load its stock and sale window into Redis",
  description:
    '`beginTime`/`endTime`: `YYYY-MM-DDTHH:mm:ss` in the service zone (or with an offset), or epoch ms; a sale lasts 1 s to 366 days and begins within 366 days of now. `buckets` splits a hot voucher\'s stock over Redis keys. `purchaseRules` (optional, one per scope): `{scope: "shop" | "campaign", limit: K, days: N}` = at most K orders per user across the shop\'s rule-carrying vouchers / the vouchers naming `campaign` (per shop) in the last N×24 h; a refused reservation answers `LIMIT_REACHED`.',
  access: "operator",
  data: NumericId,
  outcomes: ["NOT_FOUND"],
  errors: ["INVALID_INPUT"],
};

export const voucher = new Hono<AppEnv>()
  .get(
    "/list/:shopId",
    doc(
      {
        tag: "vouchers",
        summary: "Vouchers of a shop on sale; seckill ones with `stock`, `beginTime`, `endTime`. Amounts in cents",
        description: LISTING_LIMIT_NOTE,
        access: "public",
        params: ShopIdParam,
        data: z.array(Voucher),
        errors: ["RATE_LIMITED", "UNAVAILABLE"],
      },
      (c) => servePrepared(c, c.get("deps").isolate.caches.vouchers, parseParams(ShopIdParam, c.req.param()).shopId),
    ),
  )
  .post(
    "/",
    requireOperator,
    jsonBody(BODY_LIMITS.operator),
    doc(
      {
        tag: "operator",
        summary: "Create a normal voucher",
        access: "operator",
        data: NumericId,
        outcomes: ["NOT_FOUND"],
        errors: ["INVALID_INPUT"],
      },
      v("json", VoucherBody),
    ),
    idempotentOperator(BODY_LIMITS.operator),
    async (c) => answer(c, await createVoucher(c.get("deps"), c.req.valid("json"))),
  )
  .post(
    "/seckill",
    requireOperator,
    jsonBody(BODY_LIMITS.operator),
    doc(CREATE_SECKILL, v("json", SeckillBody)),
    idempotentOperator(BODY_LIMITS.operator),
    async (c) => answer(c, await createSeckill(c.get("deps"), c.req.valid("json"))),
  );

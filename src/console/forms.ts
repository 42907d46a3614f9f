/**
 * The console's voucher forms: form fields (strings) → the same inputs and the same rules as
 * POST /api/voucher and POST /api/voucher/seckill (src/routes/voucher.ts), with each error kept
 * next to its field. The rows are written by the services the operator API calls.
 */
import { z } from "zod";
import type { Deps } from "../deps.ts";
import { refreshVoucherList, saleWindow } from "../routes/voucher.ts";
import { createSeckillVoucher } from "../services/seckill/config.ts";
import { insertVoucher, shopExists } from "../services/shops.ts";

export type FieldErrors = Partial<Record<string, string>>;
export type FormValues = Record<string, string>;

/** A whole decimal number from a form field (empty → undefined, so defaults apply). */
const num = (min: number, max: number, what = "a whole number") =>
  z
    .string()
    .trim()
    .regex(/^\d{1,16}$/, `must be ${what}`)
    .transform(Number)
    .pipe(z.number().int().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`));
const optionalNum = (min: number, max: number, dflt: number) =>
  z
    .string()
    .trim()
    .optional()
    .transform((s) => (s === undefined || s === "" ? String(dflt) : s))
    .pipe(num(min, max));
const text = (max: number) => z.string().trim().max(max, `at most ${max} characters`);
const optionalText = (max: number) =>
  text(max)
    .optional()
    .transform((s) => (s ? s : null));

const VoucherForm = z.object({
  shopId: num(1, Number.MAX_SAFE_INTEGER, "a shop id"),
  title: text(255).min(1, "required"),
  subTitle: optionalText(255),
  rules: optionalText(1024),
  payValue: num(0, 100_000_000, "whole cents"),
  actualValue: num(0, 100_000_000, "whole cents"),
});
const SeckillForm = VoucherForm.extend({
  stock: num(1, 10_000_000),
  beginTime: z.string().trim().min(10, "must be YYYY-MM-DDTHH:mm:ss").max(40),
  endTime: z.string().trim().min(10, "must be YYYY-MM-DDTHH:mm:ss").max(40),
  buckets: optionalNum(1, 64, 1),
  shopDailyLimit: optionalNum(0, 1000, 0),
});

export const VOUCHER_FIELDS = ["shopId", "title", "subTitle", "rules", "payValue", "actualValue"] as const;
export const SECKILL_FIELDS = [...VOUCHER_FIELDS, "stock", "beginTime", "endTime", "buckets", "shopDailyLimit"] as const;

export type FormResult = { ok: true; voucherId: number } | { ok: false; errors: FieldErrors };

function fieldErrors(err: z.ZodError): FieldErrors {
  const out: FieldErrors = {};
  for (const issue of err.issues) {
    const field = String(issue.path[0] ?? "form");
    out[field] ??= issue.message;
  }
  return out;
}

export async function submitVoucher(deps: Deps, values: FormValues): Promise<FormResult> {
  const parsed = VoucherForm.safeParse(values);
  if (!parsed.success) return { ok: false, errors: fieldErrors(parsed.error) };
  const body = parsed.data;
  if (!(await shopExists(deps, body.shopId))) return { ok: false, errors: { shopId: "unknown shop" } };
  const voucherId = await insertVoucher(deps.db, body);
  await refreshVoucherList(deps, body.shopId);
  return { ok: true, voucherId };
}

export async function submitSeckill(deps: Deps, values: FormValues): Promise<FormResult> {
  const parsed = SeckillForm.safeParse(values);
  if (!parsed.success) return { ok: false, errors: fieldErrors(parsed.error) };
  const body = parsed.data;
  // The same window rules as POST /api/voucher/seckill, reported next to the field they concern.
  const window = saleWindow(body.beginTime, body.endTime, deps.config.SERVICE_TIME_ZONE, deps.clock.now());
  const errors: FieldErrors = {};
  if (!window.ok) errors[window.field] = window.message;
  if (body.buckets > body.stock) errors.buckets = "more buckets than stock";
  if (!window.ok || Object.keys(errors).length > 0) return { ok: false, errors };
  if (!(await shopExists(deps, body.shopId))) return { ok: false, errors: { shopId: "unknown shop" } };
  const cfg = await createSeckillVoucher(deps, {
    ...body,
    beginMs: window.beginMs,
    endMs: window.endMs,
    dailyLimit: body.shopDailyLimit,
  });
  await refreshVoucherList(deps, body.shopId);
  return { ok: true, voucherId: cfg.voucherId };
}

/**
 * The console's voucher forms: form fields (strings) → the same inputs and the same rules as
 * POST /api/voucher and POST /api/voucher/seckill (src/routes/voucher.ts), with each error kept
 * next to its field. The rows are written by the services the operator API calls.
 */
import { z } from "zod";
import type { Deps } from "../deps.ts";
import { refreshVoucherList, saleWindow } from "../routes/voucher.ts";
import { CampaignRuleConflict, createSeckillVoucher } from "../services/seckill/config.ts";
import { CampaignId, checkRules, type PurchaseRule, type RuleScope } from "../services/seckill/rules.ts";
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
  // Purchase-limit rules as flat fields: a scope's rule exists when its K or N is filled in (the
  // bounds are POST /api/voucher/seckill's, checked by checkRules).
  shopRuleLimit: optionalNum(0, Number.MAX_SAFE_INTEGER, 0),
  shopRuleDays: optionalNum(0, Number.MAX_SAFE_INTEGER, 0),
  campaign: optionalText(64),
  campaignRuleLimit: optionalNum(0, Number.MAX_SAFE_INTEGER, 0),
  campaignRuleDays: optionalNum(0, Number.MAX_SAFE_INTEGER, 0),
});

const RULE_FIELDS: Record<RuleScope, { limit: "shopRuleLimit" | "campaignRuleLimit"; days: "shopRuleDays" | "campaignRuleDays" }> = {
  shop: { limit: "shopRuleLimit", days: "shopRuleDays" },
  campaign: { limit: "campaignRuleLimit", days: "campaignRuleDays" },
};

/** The form's rule fields → the API's rules, with each error on its own field. */
function formRules(body: z.infer<typeof SeckillForm>, c: Deps["config"]): { ok: true; rules: PurchaseRule[] } | { ok: false; errors: FieldErrors } {
  const rules: PurchaseRule[] = [];
  const errors: FieldErrors = {};
  for (const scope of ["shop", "campaign"] as const) {
    const f = RULE_FIELDS[scope];
    const limit = body[f.limit];
    const days = body[f.days];
    if (limit === 0 && days === 0) continue;
    if (limit === 0) errors[f.limit] = "must be at least 1 (or leave both empty)";
    else if (days === 0) errors[f.days] = "must be at least 1 (or leave both empty)";
    else rules.push({ scope, limit, days });
  }
  if (Object.keys(errors).length > 0) return { ok: false, errors };
  if (body.campaign !== null) {
    const id = CampaignId.safeParse(body.campaign);
    if (!id.success) return { ok: false, errors: { campaign: id.error.issues[0]?.message ?? "invalid campaign" } };
  }
  const checked = checkRules(rules, body.campaign, c);
  if (checked.ok) return { ok: true, rules: checked.rules };
  const m = /^purchaseRules\.(\d+)\.(limit|days)$/.exec(checked.field);
  const rule = m ? rules[Number(m[1])] : undefined;
  const field = rule && m ? RULE_FIELDS[rule.scope][m[2] as "limit" | "days"] : "campaign";
  return { ok: false, errors: { [field]: checked.message } };
}

export const VOUCHER_FIELDS = ["shopId", "title", "subTitle", "rules", "payValue", "actualValue"] as const;
export const SECKILL_FIELDS = [
  ...VOUCHER_FIELDS,
  "stock",
  "beginTime",
  "endTime",
  "buckets",
  "shopDailyLimit",
  "shopRuleLimit",
  "shopRuleDays",
  "campaign",
  "campaignRuleLimit",
  "campaignRuleDays",
] as const;

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
  const rules = formRules(body, deps.config);
  if (!rules.ok) Object.assign(errors, rules.errors);
  if (!window.ok || !rules.ok || Object.keys(errors).length > 0) return { ok: false, errors };
  if (!(await shopExists(deps, body.shopId))) return { ok: false, errors: { shopId: "unknown shop" } };
  let cfg: Awaited<ReturnType<typeof createSeckillVoucher>>;
  try {
    cfg = await createSeckillVoucher(deps, {
      ...body,
      beginMs: window.beginMs,
      endMs: window.endMs,
      dailyLimit: body.shopDailyLimit,
      purchaseRules: rules.rules,
    });
  } catch (err) {
    if (err instanceof CampaignRuleConflict) return { ok: false, errors: { campaign: err.message } };
    throw err;
  }
  // Over any cached "not found" of this id (see routes/voucher.ts).
  await deps.isolate.caches.seckill.set(deps, cfg.voucherId, cfg);
  await refreshVoucherList(deps, body.shopId);
  return { ok: true, voucherId: cfg.voucherId };
}

/**
 * The console's voucher forms: form fields (strings) → the inputs POST /api/voucher and
 * POST /api/voucher/seckill take, then the same service (services/vouchers.ts: every check, the
 * insert, the cache refresh). What is left here is the form's own side: parsing text fields, the
 * purchase rules as flat fields, and putting each error next to the field it is about.
 */
import { z } from "zod";
import type { Deps } from "../deps.ts";
import type { PurchaseRule, RuleScope } from "../services/seckill/rules.ts";
import { createSeckill, createVoucher, type VoucherOutcome, type VoucherRefusal } from "../services/vouchers.ts";

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
  // bounds are POST /api/voucher/seckill's, checked by the service).
  shopRuleLimit: optionalNum(0, Number.MAX_SAFE_INTEGER, 0),
  shopRuleDays: optionalNum(0, Number.MAX_SAFE_INTEGER, 0),
  campaign: optionalText(64),
  campaignRuleLimit: optionalNum(0, Number.MAX_SAFE_INTEGER, 0),
  campaignRuleDays: optionalNum(0, Number.MAX_SAFE_INTEGER, 0),
});

const RULE_FIELDS: Record<
  RuleScope,
  { limit: "shopRuleLimit" | "campaignRuleLimit"; days: "shopRuleDays" | "campaignRuleDays" }
> = {
  shop: { limit: "shopRuleLimit", days: "shopRuleDays" },
  campaign: { limit: "campaignRuleLimit", days: "campaignRuleDays" },
};

/** The form's rule fields → the API's rules (in this order: shop, campaign), with each half-filled rule's error on its field. */
function formRules(
  body: z.infer<typeof SeckillForm>,
): { ok: true; rules: PurchaseRule[] } | { ok: false; errors: FieldErrors } {
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
  return Object.keys(errors).length > 0 ? { ok: false, errors } : { ok: true, rules };
}

/**
 * The form field a refusal of the service is about, and its message without the API's
 * `<field>: ` prefix (the form shows it next to the field instead). A rule's field
 * (`purchaseRules.<i>.limit`) maps through the rules the form sent; a campaign conflict to the
 * campaign field.
 */
function fieldError(r: VoucherRefusal, rules: readonly PurchaseRule[]): FieldErrors {
  const message = r.message.startsWith(`${r.field}: `) ? r.message.slice(r.field.length + 2) : r.message;
  const m = /^purchaseRules\.(\d+)\.(limit|days)$/.exec(r.field);
  const rule = m ? rules[Number(m[1])] : undefined;
  const field =
    rule && m
      ? RULE_FIELDS[rule.scope][m[2] as "limit" | "days"]
      : r.field.startsWith("purchaseRules")
        ? "campaign"
        : r.field;
  return { [field]: message };
}

export type FormResult = { ok: true; voucherId: number } | { ok: false; errors: FieldErrors };

function fieldErrors(err: z.ZodError): FieldErrors {
  const out: FieldErrors = {};
  for (const issue of err.issues) {
    const field = String(issue.path[0] ?? "form");
    out[field] ??= issue.message;
  }
  return out;
}

const resultOf = (res: VoucherOutcome, rules: readonly PurchaseRule[] = []): FormResult =>
  res.ok ? res : { ok: false, errors: fieldError(res, rules) };

export async function submitVoucher(deps: Deps, values: FormValues): Promise<FormResult> {
  const parsed = VoucherForm.safeParse(values);
  if (!parsed.success) return { ok: false, errors: fieldErrors(parsed.error) };
  return resultOf(await createVoucher(deps, parsed.data));
}

export async function submitSeckill(deps: Deps, values: FormValues): Promise<FormResult> {
  const parsed = SeckillForm.safeParse(values);
  if (!parsed.success) return { ok: false, errors: fieldErrors(parsed.error) };
  const body = parsed.data;
  const rules = formRules(body);
  if (!rules.ok) return rules;
  const res = await createSeckill(deps, {
    shopId: body.shopId,
    title: body.title,
    subTitle: body.subTitle,
    rules: body.rules,
    payValue: body.payValue,
    actualValue: body.actualValue,
    stock: body.stock,
    beginTime: body.beginTime,
    endTime: body.endTime,
    buckets: body.buckets,
    shopDailyLimit: body.shopDailyLimit,
    purchaseRules: rules.rules,
    campaign: body.campaign,
  });
  return resultOf(res, rules.rules);
}

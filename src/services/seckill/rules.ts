/**
 * Purchase-limit rules of a seckill voucher ("the Ctrip case"): "at most K seckill orders per user
 * across this shop / this campaign over the last N days", set when the voucher is created, immutable
 * after, checked atomically inside reserve-stock.lua and given back by the releases when an order
 * is cancelled.
 * A rule log is a ZSET per (scope, user): member = order id, score = reservation time; a rule counts
 * the entries in its rolling window (ZCOUNT). Only vouchers carrying a rule of a scope record into
 * it. Campaigns are per shop (their logs carry the shop's hash tag, so the script stays valid on a
 * cluster). Logs are trimmed only past PURCHASE_RULE_MAX_DAYS and their TTL only ever extended.
 * Paid and refunded orders keep their quota: buy → refund → buy must not reset a limit.
 * The model in full: docs/modules.md "services/seckill/rules.ts", docs/decisions/limits.md.
 */
import { z } from "zod";
import type { Config } from "../../env.ts";
import { keys } from "../../redis/keys.ts";

export type RuleScope = "shop" | "campaign";

export interface PurchaseRule {
  scope: RuleScope;
  /** K: purchases allowed in the window, ≥ 1. */
  limit: number;
  /** N: window length, whole days of 24 h. */
  days: number;
}

export const DAY_MS = 86_400_000;

/** Canonical rule order (the order of their keys in reserve/release calls and of the meta encoding). */
const SCOPE_ORDER: Record<RuleScope, number> = { shop: 0, campaign: 1 };

/** One rule as the API and the console accept it (bounds that depend on config are checked by `checkRules`). */
export const PurchaseRuleInput = z.strictObject({
  scope: z.enum(["shop", "campaign"], { error: 'must be "shop" or "campaign"' }),
  limit: z.number({ error: "must be a number" }).int("must be an integer").min(1, "must be at least 1"),
  days: z.number({ error: "must be a number" }).int("must be whole days").min(1, "must be at least 1"),
});
/** At most one rule per scope, so at most two; duplicates are reported by `checkRules` with their index. */
export const PurchaseRulesInput = z.array(PurchaseRuleInput).max(2, "at most one rule per scope (shop, campaign)");

/**
 * A campaign id is part of a Redis key name: a short token, no `:` (key separator) or braces
 * (hash tags), no spaces.
 */
export const CampaignId = z
  .string({ error: "must be a string" })
  .regex(/^[A-Za-z0-9_-]{1,64}$/, "1–64 letters, digits, '-' or '_'");

export type RuleCheck = { ok: true; rules: PurchaseRule[] } | { ok: false; field: string; message: string };

/**
 * Checks what zod's shape cannot: the configured bounds of K and N, one rule per scope, and a
 * campaign named iff there is a campaign rule. Returns the rules in canonical order.
 */
export function checkRules(
  rules: readonly PurchaseRule[],
  campaign: string | null,
  c: Pick<Config, "PURCHASE_RULE_MAX_DAYS" | "PURCHASE_RULE_MAX_LIMIT">,
): RuleCheck {
  const seen = new Set<RuleScope>();
  for (const [i, r] of rules.entries()) {
    if (r.limit > c.PURCHASE_RULE_MAX_LIMIT)
      return { ok: false, field: `purchaseRules.${i}.limit`, message: `must be at most ${c.PURCHASE_RULE_MAX_LIMIT}` };
    if (r.days > c.PURCHASE_RULE_MAX_DAYS)
      return { ok: false, field: `purchaseRules.${i}.days`, message: `must be at most ${c.PURCHASE_RULE_MAX_DAYS}` };
    if (seen.has(r.scope))
      return {
        ok: false,
        field: `purchaseRules.${i}.scope`,
        message: `a second "${r.scope}" rule (one rule per scope)`,
      };
    seen.add(r.scope);
  }
  if (seen.has("campaign") && campaign === null)
    return { ok: false, field: "campaign", message: "required with a campaign rule" };
  if (!seen.has("campaign") && campaign !== null)
    return { ok: false, field: "campaign", message: "only with a campaign rule" };
  return { ok: true, rules: canonicalRules(rules) };
}

export function canonicalRules(rules: readonly PurchaseRule[]): PurchaseRule[] {
  return [...rules]
    .map((r) => ({ scope: r.scope, limit: r.limit, days: r.days }))
    .sort((a, b) => SCOPE_ORDER[a.scope] - SCOPE_ORDER[b.scope]);
}

/** The voucher meta's `rules` field: `scope:K:N` joined by `,`, canonical order ("" = none). Parsed by reserve-stock.lua. */
export function encodeRules(rules: readonly PurchaseRule[]): string {
  return rules.map((r) => `${r.scope}:${r.limit}:${r.days}`).join(",");
}

const StoredRules = z.array(PurchaseRuleInput).max(2);

/**
 * tb_seckill_config.purchase_rules (JSON text, NULL = none). A row that does not parse is a bug
 * or a manual edit: loading fails loudly rather than selling without the rule.
 */
export function parseRulesColumn(raw: unknown, voucherId: number): PurchaseRule[] {
  if (raw === null || raw === undefined || raw === "") return [];
  const parsed = StoredRules.safeParse(typeof raw === "string" ? JSON.parse(raw) : raw);
  if (!parsed.success)
    throw new Error(`seckill voucher ${voucherId}: unreadable purchase_rules ${JSON.stringify(raw)}`);
  return canonicalRules(parsed.data);
}

/** What a rule-carrying config needs; absent `purchaseRules` = none (configs cached before rules existed). */
export interface RuleSubject {
  shopId: number;
  purchaseRules?: readonly PurchaseRule[];
  campaign?: string | null;
}

/** A user's rule-log keys for a voucher, in canonical rule order (empty without rules). */
export function ruleKeys(cfg: RuleSubject, userId: number): string[] {
  const rules = cfg.purchaseRules;
  if (!rules || rules.length === 0) return [];
  return rules.map((r) =>
    r.scope === "shop"
      ? keys.seckill.ruleShop(cfg.shopId, userId)
      : keys.seckill.ruleCampaign(cfg.shopId, String(cfg.campaign), userId),
  );
}

/** The refusal message naming rule `i` (1-based, canonical order) of `cfg`. */
export function ruleMessage(cfg: RuleSubject, i: number): string {
  const r = cfg.purchaseRules?.[i - 1];
  if (!r) return "purchase limit reached";
  const where = r.scope === "shop" ? "this shop" : `campaign "${cfg.campaign}"`;
  const span = r.days === 1 ? "24 hours" : `${r.days} days`;
  return `purchase limit reached: at most ${r.limit} per user across ${where} in ${span}`;
}

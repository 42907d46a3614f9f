/**
 * Creating vouchers, for every operator surface: POST /api/voucher and /api/voucher/seckill
 * (routes/voucher.ts, JSON) and the console's forms (console/forms.ts, HTML). Both hand in inputs
 * already in shape (their own parsing: zod on JSON, form fields → numbers) and get the same checks
 * in the same order and one typed outcome back:
 *
 *   price ≤ face value → campaign id → sale window → purchase rules → buckets ≤ stock → shop exists
 *   → insert (a campaign registered with another rule is refused inside the transaction) → the
 *   shop's cached voucher list (and, for a seckill, its cached config) overwritten.
 *
 * A refusal names the input field it is about (`purchaseRules.0.limit` for a rule, as the JSON
 * body spells it) and carries the message the API answers; `code` says how: NOT_FOUND is a
 * business outcome (an unknown shop, HTTP 200 `success:false`), INVALID_INPUT a 400. Nothing is
 * written before every check has passed, and nothing is half-written after (config.ts: one
 * MySQL transaction, then Redis, which reconcile reloads if that step failed).
 */
import type { Deps } from "../deps.ts";
import { parseDateTime, parseSqlUtc } from "../util/time.ts";
import { CampaignRuleConflict, createSeckillVoucher, type SeckillConfig } from "./seckill/config.ts";
import { CampaignId, checkRules, type PurchaseRule } from "./seckill/rules.ts";
import { insertVoucher, loadVouchersOfShop, shopExists, type VoucherInput } from "./shops.ts";

// ---------------------------------------------------------------------------------------------
// Sale window and state

/**
 * What a sale window must be. Times are kept in whole seconds (MySQL DATETIME), so Redis and MySQL
 * agree on them; the window lasts at least a second (tb_seckill_voucher CHECK end_time > begin_time)
 * and at most a year, and begins within a year of now (either side: a sale may be back-dated).
 */
export const SALE_HORIZON_MS = 366 * 86_400_000;
export const SALE_MIN_MS = 1_000;

export type SaleWindow =
  | { ok: true; beginMs: number; endMs: number }
  | { ok: false; field: "beginTime" | "endTime"; message: string };

/**
 * Checks a sale window given as `YYYY-MM-DDTHH:mm:ss` in `zone` (or with a `Z`/`±HH:MM` offset) or
 * epoch ms; `field` names the input a refusal is about.
 */
export function saleWindow(begin: string | number, end: string | number, zone: string, now: number): SaleWindow {
  const toMs = (t: string | number) => (typeof t === "number" ? t : parseDateTime(t, zone));
  const b = toMs(begin);
  const e = toMs(end);
  const calendar = "beginTime/endTime must be real calendar times, YYYY-MM-DDTHH:mm:ss (or epoch ms)";
  if (b === null) return { ok: false, field: "beginTime", message: calendar };
  if (e === null) return { ok: false, field: "endTime", message: calendar };
  if (Math.abs(b - now) > SALE_HORIZON_MS)
    return { ok: false, field: "beginTime", message: "beginTime must be within 366 days of now" };
  // On the times as given: ≥ 1 s apart, they stay apart after truncation to whole seconds.
  if (e - b < SALE_MIN_MS)
    return { ok: false, field: "endTime", message: "endTime must be at least 1 second after beginTime" };
  if (e - b > SALE_HORIZON_MS) return { ok: false, field: "endTime", message: "a sale lasts at most 366 days" };
  return { ok: true, beginMs: Math.floor(b / 1000) * 1000, endMs: Math.floor(e / 1000) * 1000 };
}

export type SaleState = "upcoming" | "on sale" | "sold out" | "ended";

/** A seckill sale's state at `now`; `stockLeft` null = unknown (never "sold out"). */
export function saleState(
  cfg: Pick<SeckillConfig, "beginMs" | "endMs">,
  stockLeft: number | null,
  now: number,
): SaleState {
  if (now >= cfg.endMs) return "ended";
  if (now < cfg.beginMs) return "upcoming";
  return stockLeft === 0 ? "sold out" : "on sale";
}

// ---------------------------------------------------------------------------------------------
// Creation

/** A seckill voucher as the operator asks for it: the sale window still as given (checked here). */
export interface SeckillRequest extends VoucherInput {
  /** tb_seckill_voucher.stock, ≥ 1. */
  stock: number;
  beginTime: string | number;
  endTime: string | number;
  /** Redis stock buckets for a hot voucher (1 = a single key), ≤ stock. */
  buckets: number;
  /** Max seckill orders per user per service day across this shop's vouchers (0 = no rule). */
  shopDailyLimit: number;
  /** Purchase-limit rules in the caller's order (refusals name them by index); checked here. */
  purchaseRules: readonly PurchaseRule[];
  /** The (per-shop) campaign a campaign rule counts across; required iff there is one. */
  campaign: string | null;
}

export type VoucherRefusal = {
  ok: false;
  /** NOT_FOUND: a business outcome (the shop does not exist). INVALID_INPUT: the input breaks a rule. */
  code: "NOT_FOUND" | "INVALID_INPUT";
  /** The input field the refusal is about, as the JSON body names it (`purchaseRules.0.days`). */
  field: string;
  /** The API's message (rule refusals start with `<field>: `). */
  message: string;
};

export type VoucherOutcome = { ok: true; voucherId: number } | VoucherRefusal;

const invalid = (field: string, message: string): VoucherRefusal => ({
  ok: false,
  code: "INVALID_INPUT",
  field,
  message,
});
const NO_SHOP: VoucherRefusal = { ok: false, code: "NOT_FOUND", field: "shopId", message: "shop not found" };

/** A voucher sells for at most what it is worth. */
function checkPrice(v: VoucherInput): VoucherRefusal | null {
  return v.payValue > v.actualValue ? invalid("payValue", "payValue must not exceed actualValue") : null;
}

/** A voucher write is visible at once: the shop's cached list is overwritten from MySQL. */
export async function refreshVoucherList(deps: Deps, shopId: number): Promise<void> {
  await deps.isolate.caches.vouchers.set(deps, shopId, await loadVouchersOfShop(deps, shopId));
}

/** Creates a normal voucher (type 0, on sale). */
export async function createVoucher(deps: Deps, v: VoucherInput): Promise<VoucherOutcome> {
  const refused = checkPrice(v);
  if (refused) return refused;
  if (!(await shopExists(deps, v.shopId))) return NO_SHOP;
  const voucherId = await insertVoucher(deps.db, v);
  await refreshVoucherList(deps, v.shopId);
  return { ok: true, voucherId };
}

/** Creates a seckill voucher, loads its stock and sale window into Redis and refreshes the caches. */
export async function createSeckill(deps: Deps, v: SeckillRequest): Promise<VoucherOutcome> {
  const refused = checkPrice(v);
  if (refused) return refused;
  if (v.campaign !== null) {
    const id = CampaignId.safeParse(v.campaign);
    if (!id.success) return invalid("campaign", `campaign: ${id.error.issues[0]?.message ?? "invalid campaign id"}`);
  }
  const window = saleWindow(v.beginTime, v.endTime, deps.config.SERVICE_TIME_ZONE, deps.clock.now());
  if (!window.ok) return invalid(window.field, window.message);
  const rules = checkRules(v.purchaseRules, v.campaign, deps.config);
  if (!rules.ok) return invalid(rules.field, `${rules.field}: ${rules.message}`);
  if (v.buckets > v.stock) return invalid("buckets", "more buckets than stock");
  if (!(await shopExists(deps, v.shopId))) return NO_SHOP;
  let cfg: SeckillConfig;
  try {
    cfg = await createSeckillVoucher(deps, {
      shopId: v.shopId,
      title: v.title,
      subTitle: v.subTitle,
      rules: v.rules,
      payValue: v.payValue,
      actualValue: v.actualValue,
      stock: v.stock,
      beginMs: window.beginMs,
      endMs: window.endMs,
      buckets: v.buckets,
      dailyLimit: v.shopDailyLimit,
      purchaseRules: rules.rules,
      campaign: v.campaign,
    });
  } catch (err) {
    if (err instanceof CampaignRuleConflict) return invalid("purchaseRules", `purchaseRules: ${err.message}`);
    throw err;
  }
  // Over any "not found" a buyer's early probe of this id left in the cache: at once here, in
  // L2, and in other isolates' L1 through the write log (cache/hot.ts).
  await deps.isolate.caches.seckill.set(deps, cfg.voucherId, cfg);
  await refreshVoucherList(deps, v.shopId);
  return { ok: true, voucherId: cfg.voucherId };
}

// ---------------------------------------------------------------------------------------------
// The operator's list

export interface VoucherRow {
  id: number;
  shopId: number;
  title: string;
  /** 0 normal, 1 seckill. */
  type: number;
  /** Cents. */
  payValue: number;
  actualValue: number;
  /** Seckill only (else null): stock in MySQL and the sale window, epoch ms. */
  stock: number | null;
  beginMs: number | null;
  endMs: number | null;
  /** A seckill's sale state, or a normal voucher's status (on sale, off sale, expired). */
  state: string;
}

const STATUS_NAMES: Record<number, string> = { 1: "on sale", 2: "off sale", 3: "expired" };

/** The newest vouchers (any shop), newest first: one statement. */
export async function latestVouchers(deps: Deps, limit = 50): Promise<VoucherRow[]> {
  const rows = (
    await deps.db.execute(
      `SELECT v.id, v.shop_id, v.title, v.type, v.status, v.pay_value, v.actual_value, s.stock, s.begin_time, s.end_time
         FROM tb_voucher v LEFT JOIN tb_seckill_voucher s ON s.voucher_id = v.id
        ORDER BY v.id DESC LIMIT ?`,
      [limit],
    )
  ).rows as Record<string, string | number | null>[];
  const now = deps.clock.now();
  return rows.map((r) => {
    const seckill = Number(r.type) === 1 && r.begin_time !== null;
    const beginMs = seckill ? parseSqlUtc(String(r.begin_time)) : null;
    const endMs = seckill ? parseSqlUtc(String(r.end_time)) : null;
    const stock = seckill ? Number(r.stock) : null;
    return {
      id: Number(r.id),
      shopId: Number(r.shop_id),
      title: String(r.title),
      type: Number(r.type),
      payValue: Number(r.pay_value),
      actualValue: Number(r.actual_value),
      stock,
      beginMs,
      endMs,
      state:
        beginMs !== null && endMs !== null
          ? saleState({ beginMs, endMs }, stock, now)
          : (STATUS_NAMES[Number(r.status)] ?? "?"),
    };
  });
}

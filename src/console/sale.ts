/**
 * One seckill sale as the console's live view shows it (views.tsx SalePage and its event stream):
 * the sale's Redis and MySQL numbers (services/ops.ts saleNumbers: one MULTI per database the
 * voucher lives in — its shards, summed — and one MySQL statement) with the attempt counters
 * summed across isolates (services/sale-counters.ts `saleOutcomes`: one HGETALL), read in
 * parallel — about 2 round trips per tick, whatever the crowd.
 */
import type { Deps } from "../deps.ts";
import { type SaleNumbers, saleNumbers } from "../services/ops.ts";
import type { SeckillConfig } from "../services/seckill/config.ts";
import { type OutcomeCounts, saleOutcomes } from "../services/sale-counters.ts";

/** The voucher's seckill configuration (cached), as the sale routes look it up. */
export { saleConfig } from "../services/ops.ts";

export interface SaleSnapshot extends SaleNumbers {
  /** Attempts by outcome (routed and fast lane), summed across isolates (each up to its last flush, ≤ 5 s old). */
  outcomes: OutcomeCounts;
  /** False when Redis did not answer: `outcomes` are then the serving isolate's alone. */
  outcomesAcrossIsolates: boolean;
  /** This isolate's fast-lane seckill answers (all vouchers). */
  fastLaneSeckill: number;
}

export async function saleSnapshot(deps: Deps, cfg: SeckillConfig): Promise<SaleSnapshot> {
  const [numbers, outcomes] = await Promise.all([saleNumbers(deps, cfg), saleOutcomes(deps, cfg.voucherId)]);
  return {
    ...numbers,
    outcomes: outcomes.counts,
    outcomesAcrossIsolates: outcomes.acrossIsolates,
    fastLaneSeckill: deps.isolate.fastLane.seckill,
  };
}

/**
 * The purchase limits a sale enforces besides one order per buyer, in words (from its config: no
 * I/O). Daily shop limit, then the rules (services/seckill/rules.ts) in canonical order.
 */
export function saleLimits(cfg: Pick<SeckillConfig, "dailyLimit" | "purchaseRules" | "campaign">): string[] {
  const out: string[] = [];
  if (cfg.dailyLimit > 0) out.push(`at most ${cfg.dailyLimit} seckill order(s) per user per service day in this shop`);
  for (const r of cfg.purchaseRules ?? []) {
    const span = r.days === 1 ? "24 hours" : `${r.days} days`;
    out.push(
      r.scope === "shop"
        ? `shop rule: at most ${r.limit} per user over ${span}, across this shop's vouchers that carry a shop rule`
        : `campaign "${cfg.campaign ?? ""}" rule: at most ${r.limit} per user over ${span}, across this shop's vouchers of the campaign`,
    );
  }
  return out;
}

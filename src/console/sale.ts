/**
 * The numbers of one seckill sale as the console shows them, read in one Redis pipeline and one
 * MySQL statement (about 2 round trips per tick, whatever the crowd), plus this isolate's counters.
 */
import type { Deps } from "../deps.ts";
import { keys } from "../redis/keys.ts";
import type { SeckillConfig } from "../services/seckill/config.ts";
import { type OutcomeCounts } from "./counters.ts";

export interface SaleSnapshot {
  at: number;
  voucherId: number;
  shopId: number;
  initial: number;
  beginMs: number;
  endMs: number;
  state: SaleState;
  /** Redis stock per bucket (index = bucket). */
  buckets: number[];
  stockLeft: number;
  /** Buyers holding a reservation or an order (the buyers set). */
  reservations: number;
  /** Rows in tb_voucher_order for the voucher, any status. */
  ordersInMysql: number;
  /** tb_seckill_voucher.stock. */
  mysqlStock: number;
  /** Reservations of the voucher's shop waiting in the outbox, and how late the oldest is, ms. */
  outboxPending: number;
  writerLagMs: number;
  /** This isolate's routed attempts by outcome, since it started. */
  outcomes: OutcomeCounts;
  /** This isolate's fast-lane seckill answers (all vouchers). */
  fastLaneSeckill: number;
}

export type SaleState = "upcoming" | "on sale" | "sold out" | "ended";

export function saleState(cfg: Pick<SeckillConfig, "beginMs" | "endMs">, stockLeft: number | null, now: number): SaleState {
  if (now >= cfg.endMs) return "ended";
  if (now < cfg.beginMs) return "upcoming";
  return stockLeft === 0 ? "sold out" : "on sale";
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

/** The voucher's seckill configuration (cached: immutable after creation), or null. */
export function saleConfig(deps: Deps, voucherId: number): Promise<SeckillConfig | null> {
  return deps.isolate.caches.seckill.get(deps, voucherId);
}

export async function saleSnapshot(deps: Deps, cfg: SeckillConfig): Promise<SaleSnapshot> {
  const { shopId, voucherId } = cfg;
  const p = deps.redis.pipeline();
  for (let i = 0; i < cfg.buckets; i++) p.get(keys.seckill.stock(shopId, voucherId, i));
  p.scard(keys.seckill.buyers(shopId, voucherId));
  p.hlen(keys.seckill.outbox(shopId));
  p.zrange(keys.seckill.outboxDue(shopId), 0, 0, { withScores: true });
  const [raw, mysql] = await Promise.all([
    p.exec() as Promise<unknown[]>,
    deps.db.execute("SELECT (SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?) AS orders, (SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?) AS stock", [voucherId, voucherId]),
  ]);
  const now = deps.clock.now();
  const buckets = Array.from({ length: cfg.buckets }, (_, i) => Number(raw[i] ?? 0));
  const stockLeft = buckets.reduce((a, b) => a + b, 0);
  const oldest = raw[cfg.buckets + 2] as (string | number)[] | undefined;
  const dueMs = oldest && oldest.length >= 2 ? Number(oldest[1]) : null;
  const row = (mysql.rows[0] ?? {}) as { orders?: string | number; stock?: string | number | null };
  return {
    at: now,
    voucherId,
    shopId,
    initial: cfg.initialStock,
    beginMs: cfg.beginMs,
    endMs: cfg.endMs,
    state: saleState(cfg, stockLeft, now),
    buckets,
    stockLeft,
    reservations: Number(raw[cfg.buckets] ?? 0),
    ordersInMysql: Number(row.orders ?? 0),
    mysqlStock: Number(row.stock ?? 0),
    outboxPending: Number(raw[cfg.buckets + 1] ?? 0),
    writerLagMs: dueMs === null ? 0 : Math.max(0, now - dueMs),
    outcomes: deps.isolate.saleCounters.of(voucherId),
    fastLaneSeckill: deps.isolate.fastLane.seckill,
  };
}

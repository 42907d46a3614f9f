/**
 * What operators read, as typed snapshots: /admin renders them as JSON (routes/admin.ts), the
 * console as HTML (routes/console.tsx, console/views.tsx), so both show the same numbers and
 * neither runs a query of its own. Times are epoch ms; the renderings format them.
 *
 * - salesOverview: the seckill sales of the jobs' registry with their Redis stock (one statement,
 *   one pipeline).
 * - saleNumbers: one sale's Redis and MySQL numbers (one pipeline, one statement per tick of the
 *   console's live view; console/sale.ts adds the attempt counters).
 * - pipelineBacklog: reservations waiting for MySQL per shop and how late the oldest is.
 * - opsSnapshot: the operations page. Breakers and limiters are this isolate's memory and always
 *   answer; every Redis- or MySQL-backed section falls back on its own (named in `unavailable`,
 *   with the scrubbed error), so the snapshot still renders while a dependency is down — which is
 *   when an operator opens it.
 * - orderById / ordersOfUser: the order lookup, queued reservations (outbox, not yet in MySQL)
 *   included.
 */
import type { Deps } from "../deps.ts";
import type { HotReport } from "../cache/hot.ts";
import { keys } from "../redis/keys.ts";
import { type DependencyName, type GuardSnapshot, resilienceSnapshot } from "../resilience.ts";
import { scrubbedMessage } from "../util/scrub.ts";
import type { AdmissionSnapshot } from "./seckill/admission.ts";
import type { SeckillConfig } from "./seckill/config.ts";
import { findReservation, getOrderRow, listOrdersOfUser, type OrderRow } from "./seckill/orders.ts";
import { listRefunds, type RefundView } from "./seckill/payments.ts";
import type { OrderGroupStats } from "./seckill/pipeline.ts";
import type { ReconcileReport } from "./seckill/reconcile.ts";
import { registeredSeckills, shopsOf } from "./seckill/registry.ts";
import { type OrderStatusName, statusName } from "./seckill/types.ts";
import { isoDay, type UvReport, uvReport } from "./uv.ts";
import { type SaleState, saleState } from "./vouchers.ts";

type Pipeline = ReturnType<Deps["redis"]["pipeline"]>;
/** http/listing-limit.ts ListingLimitSnapshot, by way of the isolate (services do not import http/). */
export type ListingLimitSnapshot = ReturnType<NonNullable<Deps["isolate"]["listingLimit"]>["snapshot"]>;

/** Queues the outbox size and its oldest due entry of a shop: two replies, read by `outboxOf`. */
function queueOutbox(p: Pipeline, shopId: number): void {
  p.hlen(keys.seckill.outbox(shopId));
  p.zrange(keys.seckill.outboxDue(shopId), 0, 0, { withScores: true });
}

/** The two replies of `queueOutbox` at `raw[at]`, `raw[at + 1]`: entries waiting, and how late the oldest is (ms, ≥ 0). */
function outboxOf(raw: unknown[], at: number, now: number): { pending: number; lagMs: number } {
  const oldest = raw[at + 1] as (string | number)[] | undefined;
  const dueMs = oldest && oldest.length >= 2 ? Number(oldest[1]) : null;
  return { pending: Number(raw[at] ?? 0), lagMs: dueMs === null ? 0 : Math.max(0, now - dueMs) };
}

// ---------------------------------------------------------------------------------------------
// Sales

export interface SaleRow {
  voucherId: number;
  shopId: number;
  initial: number;
  /** Stock left in Redis, all buckets. */
  stockLeft: number;
  beginMs: number;
  endMs: number;
  state: SaleState;
}

/** The newest `limit` sales of the jobs' registry (not ended more than 7 days ago), newest first. */
export async function salesOverview(deps: Deps, limit = 100): Promise<SaleRow[]> {
  const now = deps.clock.now();
  const cfgs = (await registeredSeckills(deps, now)).slice(-limit).reverse();
  const p = deps.redis.pipeline();
  for (const cfg of cfgs) for (let i = 0; i < cfg.buckets; i++) p.get(keys.seckill.stock(cfg.shopId, cfg.voucherId, i));
  const raw = cfgs.length > 0 ? ((await p.exec()) as unknown[]) : [];
  let at = 0;
  return cfgs.map((cfg) => {
    let left = 0;
    for (let i = 0; i < cfg.buckets; i++) left += Number(raw[at++] ?? 0);
    return { voucherId: cfg.voucherId, shopId: cfg.shopId, initial: cfg.initialStock, stockLeft: left, beginMs: cfg.beginMs, endMs: cfg.endMs, state: saleState(cfg, left, now) };
  });
}

/** The voucher's seckill configuration (cached: immutable after creation), or null. */
export function saleConfig(deps: Deps, voucherId: number): Promise<SeckillConfig | null> {
  return deps.isolate.caches.seckill.get(deps, voucherId);
}

/** One sale's numbers in Redis and MySQL at `at`. */
export interface SaleNumbers {
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
}

/** One Redis pipeline and one MySQL statement, in parallel: about two round trips, whatever the crowd. */
export async function saleNumbers(deps: Deps, cfg: SeckillConfig): Promise<SaleNumbers> {
  const { shopId, voucherId } = cfg;
  const p = deps.redis.pipeline();
  for (let i = 0; i < cfg.buckets; i++) p.get(keys.seckill.stock(shopId, voucherId, i));
  p.scard(keys.seckill.buyers(shopId, voucherId));
  queueOutbox(p, shopId);
  const [raw, mysql] = await Promise.all([
    p.exec() as Promise<unknown[]>,
    deps.db.execute("SELECT (SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?) AS orders, (SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?) AS stock", [voucherId, voucherId]),
  ]);
  const now = deps.clock.now();
  const buckets = Array.from({ length: cfg.buckets }, (_, i) => Number(raw[i] ?? 0));
  const stockLeft = buckets.reduce((a, b) => a + b, 0);
  const outbox = outboxOf(raw, cfg.buckets + 1, now);
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
    outboxPending: outbox.pending,
    writerLagMs: outbox.lagMs,
  };
}

// ---------------------------------------------------------------------------------------------
// Order pipeline and reconcile

/** What this isolate's writer has done (counters are per isolate, like its memory). */
export type WriterStats = OrderGroupStats & { lockConflicts: Deps["isolate"]["orderGroups"]["lockConflicts"] };

export function writerStats(deps: Deps): WriterStats {
  const g = deps.isolate.orderGroups;
  return { ...g.stats, lockConflicts: { ...g.lockConflicts } };
}

export interface PipelineBacklog {
  at: number;
  /** Shops with reservations waiting for MySQL (of those with seckill vouchers in the registry). */
  shops: { shopId: number; pending: number; lagMs: number }[];
  isolate: WriterStats;
}

/** The order queue as an operator sees it: one registry statement, one pipeline. */
export async function pipelineBacklog(deps: Deps): Promise<PipelineBacklog> {
  const now = deps.clock.now();
  const shops = shopsOf(await registeredSeckills(deps, now));
  const p = deps.redis.pipeline();
  for (const shopId of shops) queueOutbox(p, shopId);
  const raw = shops.length > 0 ? ((await p.exec()) as unknown[]) : [];
  const backlog = shops.map((shopId, i) => ({ shopId, ...outboxOf(raw, 2 * i, now) }));
  return { at: now, shops: backlog.filter((b) => b.pending > 0), isolate: writerStats(deps) };
}

/** The last Redis ↔ MySQL reconcile report (written by every run), or null before the first. */
export async function lastReconcileReport(deps: Deps): Promise<ReconcileReport | null> {
  return await deps.redis.get<ReconcileReport>(keys.seckill.reconcileReport());
}

// ---------------------------------------------------------------------------------------------
// The operations page

export type CacheReport = Awaited<ReturnType<Deps["isolate"]["caches"]["metrics"]["report"]>>;

export interface OpsSnapshot {
  at: number;
  /** Sections shown empty because their dependency did not answer, with its (scrubbed) error. */
  unavailable: { section: string; error: string }[];
  /** This isolate's breakers (memory: always answers), as GET /admin/resilience. */
  breakers: Record<DependencyName, GuardSnapshot>;
  /** This isolate's seckill admission memory. */
  admission: AdmissionSnapshot;
  /** This isolate's listing limiter; null when off (LISTING_IP_LIMIT=0). */
  listing: ListingLimitSnapshot | null;
  /** The last reconcile report; null before the first run or when Redis did not answer. */
  reconcile: ReconcileReport | null;
  /** Cache counters summed across isolates, as GET /admin/cache. */
  cache: CacheReport;
  /** GET /admin/cache/hot's report; null when hot keys are off or Redis did not answer. */
  hot: HotReport | null;
  /** Unique visitors over the last 7 service days. */
  uv: UvReport;
  /** The newest 20 refunds. */
  refunds: RefundView[];
  /** This isolate's order writer. */
  writer: WriterStats;
}

/** Sections of `OpsSnapshot.unavailable`, by the data they stand for. */
export const OPS_SECTIONS = {
  reconcile: "reconcile report",
  cache: "cache hit rates and hot keys",
  hot: "hot keys",
  uv: "unique visitors",
  refunds: "refunds",
} as const;

export async function opsSnapshot(deps: Deps): Promise<OpsSnapshot> {
  const zone = deps.config.SERVICE_TIME_ZONE;
  const now = deps.clock.now();
  const unavailable: OpsSnapshot["unavailable"] = [];
  const orElse =
    <T>(section: string, fallback: T) =>
    (err: unknown): T => {
      unavailable.push({ section, error: scrubbedMessage(err) });
      return fallback;
    };
  const metrics = deps.isolate.caches.metrics;
  const to = isoDay(now, zone);
  const from = isoDay(now - 6 * 86_400_000, zone);
  const [reconcile, { cache, hot }, uv, refunds] = await Promise.all([
    lastReconcileReport(deps).catch(orElse(OPS_SECTIONS.reconcile, null)),
    // The hot report right after the counters' flush: one pipeline more, no second flush.
    metrics
      .report(deps)
      .then(async (cache) => ({ cache, hot: await metrics.hotReport(deps, { flushed: true }).catch(orElse(OPS_SECTIONS.hot, null)) }))
      .catch(orElse(OPS_SECTIONS.cache, { cache: { modules: {}, isolates: 0, thisIsolate: {} } as CacheReport, hot: null })),
    uvReport(deps, from, to).catch(orElse(OPS_SECTIONS.uv, { from, to, days: [], total: 0 })),
    listRefunds(deps, { limit: 20 }).catch(orElse(OPS_SECTIONS.refunds, [] as RefundView[])),
  ]);
  return {
    at: now,
    unavailable,
    breakers: resilienceSnapshot(deps.isolate.resilience),
    admission: deps.isolate.seckillAdmission.snapshot(now),
    listing: deps.isolate.listingLimit?.snapshot(now) ?? null,
    reconcile,
    cache,
    hot,
    uv,
    refunds,
    writer: writerStats(deps),
  };
}

// ---------------------------------------------------------------------------------------------
// Orders

export interface OrderView {
  /** 64-bit order id, decimal string. */
  id: string;
  userId: number;
  voucherId: number;
  /** `queued`: reserved in Redis, in the outbox, not yet written to MySQL. */
  status: OrderStatusName;
  /** Epoch ms: the row's create time, or the reservation's for a queued one. */
  createdAt: number;
  paidAt: number | null;
}

const viewOf = (o: OrderRow): OrderView => ({ id: o.id, userId: o.userId, voucherId: o.voucherId, status: statusName(o.status), createdAt: o.createTime, paidAt: o.payTime });

/** An order by id: its MySQL row, else its reservation still in the outbox, else null. */
export async function orderById(deps: Deps, orderId: string): Promise<OrderView | null> {
  const row = await getOrderRow(deps, orderId);
  if (row) return viewOf(row);
  const r = await findReservation(deps, orderId);
  return r ? { id: orderId, userId: r.userId, voucherId: r.voucherId, status: "queued", createdAt: r.reservedAt, paidAt: null } : null;
}

/** A user's newest `limit` orders in MySQL (queued ones are found by id only). */
export async function ordersOfUser(deps: Deps, userId: number, limit = 20): Promise<OrderView[]> {
  return (await listOrdersOfUser(deps, userId, 1, limit)).map(viewOf);
}

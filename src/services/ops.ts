/**
 * What operators read, as typed snapshots: /admin renders them as JSON (routes/admin.ts), the
 * console as HTML (routes/console.tsx), so both show the same numbers and neither runs a query of
 * its own. Times are epoch ms. salesOverview, saleNumbers, seckillView (GET /admin/seckill/{id}),
 * pipelineBacklog, opsSnapshot, orderById / ordersOfUser.
 * Invariant: a snapshot still renders while a dependency is down — each Redis- or MySQL-backed
 * section falls back on its own and is named in `unavailable` with the scrubbed error — because
 * that is when an operator opens it. Sharded vouchers are summed over their databases; a shard
 * this deployment lacks is named (`unreadShards`). Each snapshot's cost and contents:
 * docs/modules.md "services/ops.ts".
 */
import type { Deps, RedisPort } from "../deps.ts";
import type { HotReport } from "../cache/hot.ts";
import { keys } from "../redis/keys.ts";
import { type DependencyName, type GuardSnapshot, resilienceSnapshot } from "../resilience.ts";
import { scrubbedMessage } from "../util/scrub.ts";
import type { AdmissionSnapshot } from "./seckill/admission.ts";
import type { SeckillConfig } from "./seckill/config.ts";
import { findReservation, getOrderRow, listOrdersOfUser, type OrderRow } from "./seckill/orders.ts";
import { outboxesOf, outboxRedis, parseReservation, reachableOutboxes } from "./seckill/outbox.ts";
import { listRefunds, type RefundView } from "./seckill/payments.ts";
import type { OrderGroupStats } from "./seckill/pipeline.ts";
import type { ReconcileReport } from "./seckill/reconcile.ts";
import { registeredSeckills } from "./seckill/registry.ts";
import { ShardUnavailable, shardCountOf, shardRedis } from "./seckill/shards.ts";
import { type SeckillState, type ShardState, seckillState } from "./seckill/state.ts";
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
  return { pending: Number(raw[at] ?? 0), lagMs: lagOf(dueMs, now) };
}

const lagOf = (dueMs: number | null, now: number) => (dueMs === null ? 0 : Math.max(0, now - dueMs));

/**
 * Reads queued on several databases: one pipeline per database, all sent at once by `run` — so an
 * overview costs one round trip whatever the number of shards. `queue` returns the getter of its
 * `n` replies (valid once `run` resolved); `add` must queue exactly `n` commands.
 */
function batchedReads() {
  const pipes = new Map<RedisPort, { p: Pipeline; count: number; raw: unknown[] }>();
  return {
    queue(redis: RedisPort, n: number, add: (p: Pipeline) => void): () => unknown[] {
      let e = pipes.get(redis);
      if (!e) {
        e = { p: redis.pipeline(), count: 0, raw: [] };
        pipes.set(redis, e);
      }
      const from = e.count;
      add(e.p);
      e.count += n;
      const entry = e;
      return () => entry.raw.slice(from, from + n);
    },
    async run(): Promise<void> {
      await Promise.all(
        [...pipes.values()].map(async (e) => {
          if (e.count > 0) e.raw = (await e.p.exec()) as unknown[];
        }),
      );
    },
  };
}

/** The databases holding a voucher's keys this deployment has: the main one when unsharded, else each configured shard; and how many shards it lacks. */
function readableShards(
  deps: Pick<Deps, "redis" | "seckillShards">,
  cfg: Pick<SeckillConfig, "shards">,
): { dbs: RedisPort[]; unread: number } {
  const n = shardCountOf(cfg);
  if (n === 0) return { dbs: [deps.redis], unread: 0 };
  const dbs = deps.seckillShards.slice(0, n);
  return { dbs, unread: n - dbs.length };
}

// ---------------------------------------------------------------------------------------------
// Sales

export interface SaleRow {
  voucherId: number;
  shopId: number;
  initial: number;
  /** Stock left in Redis, all buckets of every shard read. */
  stockLeft: number;
  beginMs: number;
  endMs: number;
  state: SaleState;
  /** Seckill shard databases holding the voucher; 0 = the main database. */
  shards: number;
  /** Of `shards`: those this deployment does not have (not configured), left out of `stockLeft`. */
  unreadShards: number;
}

/** The newest `limit` sales of the jobs' registry (not ended more than 7 days ago), newest first. */
export async function salesOverview(deps: Deps, limit = 100): Promise<SaleRow[]> {
  const now = deps.clock.now();
  const cfgs = (await registeredSeckills(deps, now)).slice(-limit).reverse();
  const reads = batchedReads();
  const plan = cfgs.map((cfg) => {
    const { dbs, unread } = readableShards(deps, cfg);
    const stocks = dbs.map((db) =>
      reads.queue(db, cfg.buckets, (p) => {
        for (let i = 0; i < cfg.buckets; i++) p.get(keys.seckill.stock(cfg.shopId, cfg.voucherId, i));
      }),
    );
    return { cfg, stocks, unread };
  });
  await reads.run();
  const unread = plan.filter((x) => x.unread > 0);
  if (unread.length > 0) {
    deps.log.error(
      "seckill sales in shards that are not configured are shown without them (SECKILL_SHARD_URLS lost shards a live voucher uses)",
      {
        configured: deps.seckillShards.length,
        vouchers: unread.slice(0, 20).map((x) => x.cfg.voucherId),
      },
    );
  }
  return plan.map(({ cfg, stocks, unread }) => {
    let left = 0;
    for (const replies of stocks) for (const v of replies()) left += Number(v ?? 0);
    return {
      voucherId: cfg.voucherId,
      shopId: cfg.shopId,
      initial: cfg.initialStock,
      stockLeft: left,
      beginMs: cfg.beginMs,
      endMs: cfg.endMs,
      state: saleState(cfg, left, now),
      shards: shardCountOf(cfg),
      unreadShards: unread,
    };
  });
}

/** The voucher's seckill configuration (cached: immutable after creation), or null. */
export function saleConfig(deps: Deps, voucherId: number): Promise<SeckillConfig | null> {
  return deps.isolate.caches.seckill.get(deps, voucherId);
}

/** One shard of a sale, as the console's sale view lists them. */
export interface SaleShard {
  shard: number;
  stock: number;
  buyers: number;
  /** The shard's share of the stock (moves with it); null = not loaded. */
  share: number | null;
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
  /** Redis stock per bucket (index = bucket), summed over the shards. */
  buckets: number[];
  stockLeft: number;
  /** Buyers holding a reservation or an order (the buyers sets of every shard). */
  reservations: number;
  /** Rows in tb_voucher_order for the voucher, any status. */
  ordersInMysql: number;
  /** tb_seckill_voucher.stock. */
  mysqlStock: number;
  /** Reservations of the voucher's shop waiting in its outboxes (every database the voucher lives in), and how late the oldest is, ms. */
  outboxPending: number;
  writerLagMs: number;
  /** Seckill shard databases holding the voucher; 0 = the main database (`shards` is then its one entry, shard 0). */
  shardCount: number;
  shards: SaleShard[];
}

/** The MySQL side of a sale: one statement. */
async function mysqlSide(deps: Pick<Deps, "db">, voucherId: number): Promise<{ orders: number; stock: number }> {
  const res = await deps.db.execute(
    "SELECT (SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?) AS orders, (SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?) AS stock",
    [voucherId, voucherId],
  );
  const row = (res.rows[0] ?? {}) as { orders?: string | number; stock?: string | number | null };
  return { orders: Number(row.orders ?? 0), stock: Number(row.stock ?? 0) };
}

/**
 * One MULTI per database the voucher lives in (services/seckill/state.ts) and one MySQL statement,
 * all in parallel: about two round trips, whatever the crowd or the number of shards. Rejects with
 * ShardUnavailable when the voucher lives in shards this deployment does not have.
 */
export async function saleNumbers(deps: Deps, cfg: SeckillConfig): Promise<SaleNumbers> {
  const [st, mysql] = await Promise.all([seckillState(deps, cfg), mysqlSide(deps, cfg.voucherId)]);
  const now = deps.clock.now();
  const buckets = Array.from({ length: cfg.buckets }, (_, i) => st.shards.reduce((a, s) => a + (s.buckets[i] ?? 0), 0));
  return {
    at: now,
    voucherId: cfg.voucherId,
    shopId: cfg.shopId,
    initial: cfg.initialStock,
    beginMs: cfg.beginMs,
    endMs: cfg.endMs,
    state: saleState(cfg, st.stock, now),
    buckets,
    stockLeft: st.stock,
    reservations: st.buyers,
    ordersInMysql: mysql.orders,
    mysqlStock: mysql.stock,
    outboxPending: st.shards.reduce((a, s) => a + s.shopOutbox.entries, 0),
    writerLagMs: Math.max(0, ...st.shards.map((s) => lagOf(s.shopOutbox.oldestDueMs, now))),
    shardCount: st.shardCount,
    shards: st.shards.map(({ shard, stock, buyers, share }) => ({ shard, stock, buyers, share })),
  };
}

/**
 * A shard's outbox holding more entries than this is not read entry by entry for the voucher's
 * own count (`SeckillShardView.outbox.pending` is then null): one HVALS of it would move megabytes
 * through the REST API during a MySQL outage, when the backlog is largest.
 */
export const OUTBOX_COUNT_MAX = 2_000;

/** One shard of GET /admin/seckill/{voucherId}. */
export interface SeckillShardView extends Omit<ShardState, "shopOutbox"> {
  outbox: {
    /** This voucher's reservations waiting for MySQL in the shard; null when the shop's outbox there holds more than OUTBOX_COUNT_MAX (not counted). */
    pending: number | null;
    /** Entries of the shop's outbox in the shard (every voucher of the shop homed here). */
    shopPending: number;
    /** How late the oldest claimable entry of the shop's outbox there is, ms. */
    lagMs: number;
  };
}

/** GET /admin/seckill/{voucherId}: one seckill sale now. */
export interface SeckillView extends Omit<SeckillState, "shards"> {
  at: number;
  /** Sale window (epoch ms) and state. */
  beginMs: number;
  endMs: number;
  state: SaleState;
  buckets: number;
  /** initialStock − stock: units taken out of Redis's stock. */
  sold: number;
  /**
   * sold − buyers: units neither in a shard's stock nor held by a buyer — a move between shards in
   * flight (one round trip) or a shard whose keys are gone until reconcile reloads it; 0 at rest.
   */
  unaccounted: number;
  /** tb_seckill_voucher.stock, and the voucher's rows in tb_voucher_order (any status). */
  mysqlStock: number;
  ordersInMysql: number;
  /** The voucher's reservations waiting for MySQL, all shards; null when one shard's could not be counted (see OUTBOX_COUNT_MAX). */
  outboxPending: number | null;
  /** One entry per shard (one, shard 0, when unsharded: `shardCount` 0). */
  shards: SeckillShardView[];
}

export type SeckillViewResult =
  | { ok: true; view: SeckillView }
  | { ok: false; reason: "NOT_FOUND" }
  | { ok: false; reason: "SHARDS_MISSING"; message: string };

/**
 * The voucher's reservations in one shard's outbox, from the entries themselves (reservation
 * JSON names its voucher); null past OUTBOX_COUNT_MAX. One HVALS, only for a non-empty outbox.
 */
async function voucherPending(redis: RedisPort, cfg: SeckillConfig, entries: number): Promise<number | null> {
  if (entries === 0) return 0;
  if (entries > OUTBOX_COUNT_MAX) return null;
  const raw: unknown[] = (await redis.hvals(keys.seckill.outbox(cfg.shopId))) ?? [];
  return raw.map(parseReservation).filter((r) => r.voucherId === cfg.voucherId).length;
}

/**
 * GET /admin/seckill/{voucherId}: the sale's configuration, its state in every database it lives
 * in (seckillState: one MULTI per shard), MySQL's side (one statement), then the voucher's own
 * entries in each shard's outbox (one HVALS per non-empty outbox). The outbox counts are read right
 * after the state, not with it.
 */
export async function seckillView(deps: Deps, voucherId: number): Promise<SeckillViewResult> {
  const cfg = await saleConfig(deps, voucherId);
  if (!cfg) return { ok: false, reason: "NOT_FOUND" };
  let st: SeckillState;
  let mysql: { orders: number; stock: number };
  try {
    [st, mysql] = await Promise.all([seckillState(deps, cfg), mysqlSide(deps, voucherId)]);
  } catch (err) {
    if (err instanceof ShardUnavailable) return { ok: false, reason: "SHARDS_MISSING", message: err.message };
    throw err;
  }
  const pending = await Promise.all(
    st.shards.map((s) => voucherPending(shardRedis(deps, cfg, s.shard), cfg, s.shopOutbox.entries)),
  );
  const now = deps.clock.now();
  const { shards, ...totals } = st;
  const sold = cfg.initialStock - st.stock;
  return {
    ok: true,
    view: {
      ...totals,
      at: now,
      beginMs: cfg.beginMs,
      endMs: cfg.endMs,
      state: saleState(cfg, st.stock, now),
      buckets: cfg.buckets,
      sold,
      unaccounted: sold - st.buyers,
      mysqlStock: mysql.stock,
      ordersInMysql: mysql.orders,
      outboxPending: pending.some((p) => p === null) ? null : pending.reduce<number>((a, p) => a + (p ?? 0), 0),
      shards: shards.map(({ shopOutbox, ...s }, i) => ({
        ...s,
        outbox: {
          pending: pending[i] ?? null,
          shopPending: shopOutbox.entries,
          lagMs: lagOf(shopOutbox.oldestDueMs, now),
        },
      })),
    },
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

export interface ShopBacklog {
  shopId: number;
  /** Reservations waiting for MySQL, in all the shop's outboxes. */
  pending: number;
  /** How late the oldest claimable one is (the latest of its outboxes), ms. */
  lagMs: number;
  /** The shop's outboxes in seckill shards that hold entries (empty when none): `pending` minus their sum is the main database's. */
  shards: { shard: number; pending: number; lagMs: number }[];
}

export interface PipelineBacklog {
  at: number;
  /** Shops with reservations waiting for MySQL (of those with seckill vouchers in the registry). */
  shops: ShopBacklog[];
  isolate: WriterStats;
}

/**
 * The order queue as an operator sees it: one registry statement, then every outbox the
 * registry's vouchers may have entries in (services/seckill/outbox.ts outboxesOf: the main
 * database's, and one per shard of a sharded voucher's shop), one pipeline per database, at once.
 */
export async function pipelineBacklog(deps: Deps): Promise<PipelineBacklog> {
  const now = deps.clock.now();
  const refs = reachableOutboxes(deps, outboxesOf(await registeredSeckills(deps, now)));
  const reads = batchedReads();
  const queued = refs.map((ref) => ({
    ref,
    replies: reads.queue(outboxRedis(deps, ref.shard), 2, (p) => queueOutbox(p, ref.shopId)),
  }));
  await reads.run();
  const shops = new Map<number, ShopBacklog>();
  for (const { ref, replies } of queued) {
    const o = outboxOf(replies(), 0, now);
    const b = shops.get(ref.shopId) ?? { shopId: ref.shopId, pending: 0, lagMs: 0, shards: [] };
    b.pending += o.pending;
    b.lagMs = Math.max(b.lagMs, o.lagMs);
    if (ref.shard !== undefined && o.pending > 0) b.shards.push({ shard: ref.shard, ...o });
    shops.set(ref.shopId, b);
  }
  return { at: now, shops: [...shops.values()].filter((b) => b.pending > 0), isolate: writerStats(deps) };
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
      .then(async (cache) => ({
        cache,
        hot: await metrics.hotReport(deps, { flushed: true }).catch(orElse(OPS_SECTIONS.hot, null)),
      }))
      .catch(
        orElse(OPS_SECTIONS.cache, { cache: { modules: {}, isolates: 0, thisIsolate: {} } as CacheReport, hot: null }),
      ),
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

const viewOf = (o: OrderRow): OrderView => ({
  id: o.id,
  userId: o.userId,
  voucherId: o.voucherId,
  status: statusName(o.status),
  createdAt: o.createTime,
  paidAt: o.payTime,
});

/** An order by id: its MySQL row, else its reservation still in the outbox, else null. */
export async function orderById(deps: Deps, orderId: string): Promise<OrderView | null> {
  const row = await getOrderRow(deps, orderId);
  if (row) return viewOf(row);
  const r = await findReservation(deps, orderId);
  return r
    ? { id: orderId, userId: r.userId, voucherId: r.voucherId, status: "queued", createdAt: r.reservedAt, paidAt: null }
    : null;
}

/** A user's newest `limit` orders in MySQL (queued ones are found by id only). */
export async function ordersOfUser(deps: Deps, userId: number, limit = 20): Promise<OrderView[]> {
  return (await listOrdersOfUser(deps, userId, 1, limit)).map(viewOf);
}

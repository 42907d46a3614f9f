/**
 * Closing unpaid orders, in groups (the delayed close message of a written group, and the
 * close-expired scan, closeExpired below, a cron job: jobs/index.ts). The status CAS `unpaid → cancelled` decides, as before: pay and close race
 * on it and exactly one wins. Only rows this close changed give stock back — in MySQL in the same
 * transaction (one `stock = stock + n` per voucher per group), in Redis afterwards, once per order
 * (release-stock-many.lua, idempotent through the released set).
 *
 * Trust: the order ids come from a signed message or a MySQL scan, but what is closed is decided
 * by MySQL rows and outbox entries only. An id that is neither in MySQL nor in the outbox is
 * ignored; a reservation in a message body is never used (a made-up one cannot raise stock).
 * `deadlineMs` (when given) spares orders created at or after it: a close arriving early, or
 * naming a fresh order, closes nothing.
 *
 * Sharded vouchers (shards.ts): an order's unit goes back to its buyer's home shard,
 * recomputed from the order's user (homeShard), which is where it was reserved: the orders of a
 * voucher are grouped by home shard, one release-stock-many per shard (commands per shard, never
 * per order). Reservations closed before they reached MySQL are read from the outbox of their
 * shard. Unsharded vouchers: one release per voucher in the main database, as before shards.
 */
import type { Deps } from "../../deps.ts";
import { keys } from "../../redis/keys.ts";
import { scriptsFor } from "../../redis/scripts.ts";
import {
  invocationCap,
  type LimitSource,
  metered,
  SubrequestBudget,
  SubrequestBudgetExceeded,
} from "../../ports/subrequests.ts";
import { parseSqlUtc, serviceDay, toSqlUtc } from "../../util/time.ts";
import { homeBucket, type SeckillConfig } from "./config.ts";
import { ruleKeys } from "./rules.ts";
import { withLockRetry } from "./mysql-retry.ts";
import {
  findReservation,
  outboxEntries,
  outboxesOf,
  outboxRedis,
  parseReservation,
  reachableOutboxes,
} from "./outbox.ts";
import { registeredSeckills } from "./registry.ts";
import { homeShard, ShardUnavailable, shardCountOf, shardRedis } from "./shards.ts";
import { OrderStatus, type Reservation } from "./types.ts";

type Row = Record<string, string | number | null>;

/**
 * Subrequests (src/ports/subrequests.ts) of one closeOrders call whose ids span `vouchers`
 * vouchers, at most: the MySQL read; when some ids are not in MySQL (`outbox`), the outbox read
 * and the before-write transaction (BEGIN, INSERT, SELECT, COMMIT); per voucher the CAS
 * transaction (BEGIN, SELECT … FOR UPDATE, two UPDATEs, COMMIT), the voucher's configuration on an
 * L1 miss (GET, SELECT, SET) and the release script. The number of orders does not matter (IN
 * lists). Measured in tests/jobs/subrequests.test.ts. A sharded voucher's release is one script
 * per home shard among the orders: planners count each (voucher, shard) as a voucher (over by the
 * CAS and configuration it does not repeat), and the writer's closes are of one shard only.
 */
export const CLOSE_BASE_COST = 6;
export const CLOSE_VOUCHER_COST = 9;
export function closeCost(vouchers: number, opts: { outbox?: boolean } = {}): number {
  return (opts.outbox === false ? 1 : CLOSE_BASE_COST) + CLOSE_VOUCHER_COST * vouchers;
}

/** Vouchers one close may cover and still fit one invocation (≥ 1; Infinity without a limit): the writer splits close messages by it. */
export function closeVouchersPerInvocation(d: LimitSource): number {
  return Math.max(1, Math.floor((invocationCap(d) - CLOSE_BASE_COST) / CLOSE_VOUCHER_COST));
}

/** What a release needs to know about an order. */
export interface OrderRef {
  orderId: string;
  userId: number;
  voucherId: number;
  /** Epoch ms of the reservation (its day is the daily counter's day). */
  reservedAt: number;
}

export type CloseOutcome =
  | "cancelled"
  | "cancelled-before-write"
  | "already-cancelled"
  | "not-unpaid"
  | "not-due"
  | "unknown";

export interface CloseSummary {
  outcomes: Map<string, CloseOutcome>;
  cancelled: number;
  cancelledBeforeWrite: number;
  /** Redis releases made now (a repeat is 0). */
  released: number;
}

/** `list` grouped by `keyOf`, in first-seen order. */
function groupBy<T, K>(list: readonly T[], keyOf: (t: T) => K): Map<K, T[]> {
  const m = new Map<K, T[]>();
  for (const t of list) {
    const k = keyOf(t);
    let g = m.get(k);
    if (!g) m.set(k, (g = []));
    g.push(t);
  }
  return m;
}

/**
 * Gives the units of cancelled orders back to Redis, once per order: one command per voucher (per
 * voucher and home shard for a sharded voucher, in that shard's database).
 *
 * A voucher whose shard this deployment does not configure (SECKILL_SHARD_URLS lost a shard a
 * live voucher uses) cannot be released: the others are, then ShardUnavailable is thrown — the
 * close route fails and its redelivery releases once the shard is back (the release is once per
 * order); close-expired logs it and goes on (closeOrSkip).
 */
export async function releaseManyInRedis(deps: Deps, orders: readonly OrderRef[]): Promise<number> {
  let released = 0;
  let unavailable: ShardUnavailable | undefined;
  for (const [voucherId, list] of groupBy(orders, (o) => o.voucherId)) {
    const cfg = await deps.isolate.caches.seckill.get(deps, voucherId);
    if (!cfg) throw new Error(`seckill voucher ${voucherId} has no configuration`);
    const n = shardCountOf(cfg);
    for (const [shard, inShard] of groupBy(list, (o) => homeShard(o.userId, n))) {
      try {
        released += await releaseInShard(deps, cfg, shardRedis(deps, cfg, shard), inShard);
      } catch (err) {
        if (!(err instanceof ShardUnavailable)) throw err;
        unavailable ??= err;
        deps.log.error("cancelled orders' units not released: their seckill shard is not configured", {
          voucherId,
          shard,
          orderIds: inShard.map((o) => o.orderId).slice(0, 20),
          err,
        });
      }
    }
    // This isolate no longer remembers these buyers as holders (other isolates' memos end within
    // SeckillMemory.holderMemoMs, which is at most half the payment timeout, i.e. before any deadline close).
    for (const o of list) deps.isolate.seckill.forgetHolder(voucherId, o.userId);
  }
  if (unavailable) throw unavailable;
  return released;
}

/** One release-stock-many of one voucher's orders in one database (the buyers' home shard, or the main one). */
async function releaseInShard(
  deps: Pick<Deps, "config">,
  cfg: SeckillConfig,
  redis: Deps["redis"],
  list: readonly OrderRef[],
): Promise<number> {
  const { shopId, voucherId } = cfg;
  const k: string[] = [
    keys.seckill.released(shopId, voucherId),
    keys.seckill.buyers(shopId, voucherId),
    keys.seckill.outbox(shopId),
    keys.seckill.outboxDue(shopId),
  ];
  const a: string[] = [];
  for (const o of list) {
    // The rule logs come from the voucher's (immutable) rules, so a release finds the keys its
    // reservation wrote whether or not the voucher was reloaded in between (a reload restores
    // meta, not the logs, which are per shop/campaign and user). release-stock-many.lua infers
    // the per-order block size from the key count.
    k.push(
      keys.seckill.daily(shopId, o.userId, serviceDay(o.reservedAt, deps.config.SERVICE_TIME_ZONE)),
      keys.seckill.stock(shopId, voucherId, homeBucket(o.userId, cfg.buckets)),
      ...ruleKeys(cfg, o.userId),
    );
    a.push(o.orderId, String(o.userId));
  }
  return await scriptsFor(redis).releaseStockMany.exec(k, a);
}

/** Gives one cancelled order's unit back to Redis, once per order. */
export async function releaseInRedis(deps: Deps, o: OrderRef): Promise<boolean> {
  return (await releaseManyInRedis(deps, [o])) === 1;
}

function refOf(r: Row): OrderRef & { status: number } {
  return {
    orderId: String(r.id),
    userId: Number(r.user_id),
    voucherId: Number(r.voucher_id),
    reservedAt: parseSqlUtc(String(r.create_time)),
    status: Number(r.status),
  };
}

const IN = (n: number) => Array.from({ length: n }, () => "?").join(", ");

/** Rows of `ids` in MySQL (plain read; the CAS below re-checks under locks). */
async function readRows(deps: Deps, ids: readonly string[]): Promise<Map<string, OrderRef & { status: number }>> {
  if (ids.length === 0) return new Map();
  const rows = (
    await deps.db.execute(
      `SELECT id, user_id, voucher_id, status, create_time FROM tb_voucher_order WHERE id IN (${IN(ids.length)})`,
      ids.map((id) => BigInt(id)),
    )
  ).rows as Row[];
  return new Map(rows.map((r) => [String(r.id), refOf(r)]));
}

/**
 * CAS of one voucher's unpaid orders to cancelled, with the stock credit, in one transaction.
 * Returns the orders this call cancelled.
 */
async function cancelUnpaid(
  deps: Deps,
  voucherId: number,
  ids: readonly string[],
  deadlineMs: number | undefined,
): Promise<OrderRef[]> {
  return await withLockRetry(deps, deps.isolate.orderGroups.lockConflicts, "close orders", () =>
    deps.db.transaction(async (tx) => {
      const args: unknown[] = [...ids.map((id) => BigInt(id)), voucherId, OrderStatus.unpaid];
      let sql = `SELECT id, user_id, voucher_id, status, create_time FROM tb_voucher_order WHERE id IN (${IN(ids.length)}) AND voucher_id = ? AND status = ?`;
      if (deadlineMs !== undefined) {
        sql += " AND create_time < ?";
        args.push(toSqlUtc(deadlineMs));
      }
      const locked = ((await tx.execute(`${sql} FOR UPDATE`, args)).rows as Row[]).map(refOf);
      if (locked.length === 0) return [];
      const upd = await tx.execute(
        `UPDATE tb_voucher_order SET status = ? WHERE id IN (${IN(locked.length)}) AND status = ?`,
        [OrderStatus.cancelled, ...locked.map((o) => BigInt(o.orderId)), OrderStatus.unpaid],
      );
      // Rows are locked FOR UPDATE above, so every one of them changes.
      if (upd.rowsAffected !== locked.length)
        throw new Error(`close CAS changed ${upd.rowsAffected} of ${locked.length} locked rows`);
      await tx.execute("UPDATE tb_seckill_voucher SET stock = stock + ? WHERE voucher_id = ?", [
        locked.length,
        voucherId,
      ]);
      return locked;
    }),
  );
}

/**
 * Records outbox-only reservations (never written) as cancelled, so a late writer inserts
 * nothing; no MySQL stock was taken for them, so none is given back. Returns the ids now
 * cancelled in MySQL and those the writer got to first (still unpaid: CAS them next).
 */
async function cancelBeforeWrite(
  deps: Deps,
  rs: readonly Reservation[],
): Promise<{ cancelled: Reservation[]; written: Reservation[] }> {
  if (rs.length === 0) return { cancelled: [], written: [] };
  const rows = await withLockRetry(deps, deps.isolate.orderGroups.lockConflicts, "close reservations", () =>
    deps.db.transaction(async (tx) => {
      await tx.execute(
        `INSERT IGNORE INTO tb_voucher_order (id, user_id, voucher_id, status, create_time) VALUES ${rs.map(() => "(?, ?, ?, ?, ?)").join(", ")}`,
        rs.flatMap((r) => [BigInt(r.orderId), r.userId, r.voucherId, OrderStatus.cancelled, toSqlUtc(r.reservedAt)]),
      );
      return (
        await tx.execute(
          `SELECT id, status FROM tb_voucher_order WHERE id IN (${IN(rs.length)})`,
          rs.map((r) => BigInt(r.orderId)),
        )
      ).rows as Row[];
    }),
  );
  const status = new Map(rows.map((r) => [String(r.id), Number(r.status)]));
  return {
    cancelled: rs.filter((r) => status.get(r.orderId) === OrderStatus.cancelled),
    written: rs.filter((r) => status.get(r.orderId) === OrderStatus.unpaid),
  };
}

/**
 * Closes a group of orders. `shopId` (when known) names the outbox to look in for ids not in
 * MySQL — the shop's in seckill shard `shard` when given, else in the main database; without
 * `shopId` each such id is looked up through the order index (which names its shard).
 */
export async function closeOrders(
  deps: Deps,
  orderIds: readonly string[],
  opts: { shopId?: number; shard?: number; deadlineMs?: number } = {},
): Promise<CloseSummary> {
  const ids = [...new Set(orderIds)];
  const summary: CloseSummary = { outcomes: new Map(), cancelled: 0, cancelledBeforeWrite: 0, released: 0 };
  const toRelease: OrderRef[] = [];
  const rows = await readRows(deps, ids);

  // Not in MySQL: only the outbox can say what was reserved (read before any transaction).
  const missing = ids.filter((id) => !rows.has(id));
  let pending: Reservation[] = [];
  if (missing.length > 0) {
    if (opts.shopId !== undefined)
      pending = [...(await outboxEntries({ redis: outboxRedis(deps, opts.shard) }, opts.shopId, missing)).values()];
    else
      for (const id of missing) {
        const r = await findReservation(deps, id);
        if (r) pending.push(r);
      }
  }
  for (const id of missing) summary.outcomes.set(id, "unknown");
  const isDue = (reservedAt: number) => opts.deadlineMs === undefined || reservedAt < opts.deadlineMs;
  for (const r of pending) if (!isDue(r.reservedAt)) summary.outcomes.set(r.orderId, "not-due");
  const due = pending.filter((r) => isDue(r.reservedAt));
  const before = await cancelBeforeWrite(deps, due);
  for (const r of before.cancelled) {
    summary.outcomes.set(r.orderId, "cancelled-before-write");
    summary.cancelledBeforeWrite++;
    toRelease.push(r);
  }

  // In MySQL (or just written by a racing writer): CAS per voucher.
  const candidates = new Map<number, string[]>();
  const add = (voucherId: number, id: string) => {
    let list = candidates.get(voucherId);
    if (!list) candidates.set(voucherId, (list = []));
    list.push(id);
  };
  for (const [id, o] of rows) {
    if (o.status === OrderStatus.unpaid) {
      if (isDue(o.reservedAt)) add(o.voucherId, id);
      else summary.outcomes.set(id, "not-due");
    } else if (o.status === OrderStatus.cancelled) {
      // Cancelled before: release again (a no-op unless a crash cut the earlier release short).
      summary.outcomes.set(id, "already-cancelled");
      toRelease.push(o);
    } else summary.outcomes.set(id, "not-unpaid");
  }
  for (const r of before.written) add(r.voucherId, r.orderId);
  for (const [voucherId, list] of candidates) {
    const cancelled = await cancelUnpaid(deps, voucherId, list, opts.deadlineMs);
    const done = new Set(cancelled.map((o) => o.orderId));
    for (const id of list) summary.outcomes.set(id, done.has(id) ? "cancelled" : "not-unpaid");
    summary.cancelled += cancelled.length;
    toRelease.push(...cancelled);
  }
  // After the commits; a crash here is repaired by redelivery, close-expired or reconcile.
  if (toRelease.length > 0) summary.released = await releaseManyInRedis(deps, toRelease);
  return summary;
}

/** Closes one order now, whatever its deadline (operators, tests). */
export async function closeOrder(deps: Deps, orderId: string): Promise<CloseOutcome> {
  return (await closeOrders(deps, [orderId])).outcomes.get(orderId) ?? "unknown";
}

// ---------------------------------------------------------------------------------------------
// Close-expired (cron, every minute, under its lock — jobs/index.ts)

/** Orders per close-expired group (one MySQL scan page). */
const CLOSE_BATCH = 500;

export interface CloseExpiredResult {
  closed: number;
  closedBeforeWrite: number;
  /** True when the subrequest budget ended the pass with expired orders left (the next run takes them). */
  continued?: boolean;
}

/**
 * `ids` grouped by voucher (by voucher and home shard, `unit`, for a sharded voucher's: each its
 * own release), in order, cut into runs of at most `vouchers` such units and CLOSE_BATCH ids.
 */
function voucherChunks(
  items: readonly { id: string; unit: number | string }[],
  vouchers: number,
): { ids: string[]; vouchers: number }[] {
  const byVoucher = new Map<number | string, string[]>();
  for (const it of items) {
    let list = byVoucher.get(it.unit);
    if (!list) byVoucher.set(it.unit, (list = []));
    list.push(it.id);
  }
  const out: { ids: string[]; vouchers: number }[] = [];
  let cur: { ids: string[]; vouchers: number } = { ids: [], vouchers: 0 };
  for (const list of byVoucher.values()) {
    for (let i = 0; i < list.length; i += CLOSE_BATCH) {
      const part = list.slice(i, i + CLOSE_BATCH);
      if (cur.vouchers > 0 && (cur.vouchers >= vouchers || cur.ids.length + part.length > CLOSE_BATCH)) {
        out.push(cur);
        cur = { ids: [], vouchers: 0 };
      }
      cur.ids.push(...part);
      cur.vouchers++;
    }
  }
  if (cur.vouchers > 0) out.push(cur);
  return out;
}

/**
 * One close of close-expired; a release that met an unconfigured shard (logged by
 * releaseManyInRedis; its MySQL part is done) does not stop the pass: undefined.
 */
async function closeOrSkip(
  _deps: Pick<Deps, "log">,
  close: () => Promise<CloseSummary>,
): Promise<CloseSummary | undefined> {
  try {
    return await close();
  } catch (err) {
    if (!(err instanceof ShardUnavailable)) throw err;
    return undefined;
  }
}

/** The most vouchers (≤ `max`) one closeOrders call may span with what `budget` has left beside `reserve`, or 0. */
function vouchersThatFit(budget: SubrequestBudget, reserve: number, outbox: boolean, max: number): number {
  let v = 0;
  while (v < max && budget.fits(reserve + closeCost(v + 1, { outbox }))) v++;
  return v;
}

/**
 * Closes unpaid orders past their payment deadline, and reservations that never reached MySQL
 * within it — the fallback when a delayed close message is lost — in groups. Runs on metered
 * ports within its share of the cron invocation's subrequests (src/ports/subrequests.ts).
 *
 * Subrequests: the registry read; per page one SELECT and closeOrders calls of a few vouchers
 * each (closeCost: per voucher — and home shard — not per order); per outbox (a shop's, in the
 * main database and in each seckill shard its vouchers use: outbox.ts outboxesOf) one HGETALL
 * and its closes. Past the budget the pass stops; the next run scans from the start again and
 * finds only what is still unpaid.
 */
export async function closeExpired(
  deps: Deps,
  now: number,
  budget: SubrequestBudget = SubrequestBudget.forInvocation(deps),
): Promise<CloseExpiredResult> {
  const d = metered(deps, budget);
  const deadlineMs = now - deps.config.ORDER_PAY_TIMEOUT_SECONDS * 1000;
  let closed = 0;
  let closedBeforeWrite = 0;
  // The registry, read once (its read is held in every budget check before it): the outboxes of
  // the second pass, and — only where sharded vouchers can exist — the vouchers' shards.
  let cfgs: SeckillConfig[] | undefined;
  const registry = async () => (cfgs ??= await registeredSeckills(d, now));
  try {
    const shardsOf =
      deps.seckillShards.length === 0
        ? new Map<number, number>()
        : new Map((await registry()).map((c) => [c.voucherId, shardCountOf(c)]));
    // MySQL rows still unpaid after the deadline (served by idx_status_create), a group per page.
    let after = "0";
    for (;;) {
      // A page read, at least one voucher's close, and the registry read of the outbox pass below.
      if (!budget.fits(1 + closeCost(1, { outbox: false }) + 1)) return { closed, closedBeforeWrite, continued: true };
      const rows = (
        await d.db.execute(
          "SELECT id, voucher_id, user_id FROM tb_voucher_order WHERE status = ? AND create_time < ? AND id > ? ORDER BY id LIMIT ?",
          [OrderStatus.unpaid, toSqlUtc(deadlineMs), BigInt(after), CLOSE_BATCH],
        )
      ).rows as { id: string; voucher_id: number | string; user_id: number | string }[];
      if (rows.length === 0) break;
      // A sharded voucher's orders release per home shard: each (voucher, shard) counts as a voucher.
      const items = rows.map((r) => {
        const voucherId = Number(r.voucher_id);
        const n = shardsOf.get(voucherId) ?? 0;
        return { id: String(r.id), unit: n === 0 ? voucherId : `${voucherId}:${homeShard(Number(r.user_id), n)}` };
      });
      // Every id is in MySQL: closeOrders reads no outbox for them.
      for (const chunk of voucherChunks(items, Math.max(1, vouchersThatFit(budget, 1, false, CLOSE_BATCH)))) {
        if (!budget.fits(closeCost(chunk.vouchers, { outbox: false }) + 1))
          return { closed, closedBeforeWrite, continued: true };
        const res = await closeOrSkip(deps, () => closeOrders(d, chunk.ids, { deadlineMs }));
        closed += res?.cancelled ?? 0;
      }
      // Keyset paging: an order paid meanwhile stays unpaid-looking to nobody, and one that cannot
      // be closed now is not fetched again in this pass.
      after = String(rows[rows.length - 1]?.id);
      if (rows.length < CLOSE_BATCH) break;
    }
    // Reservations that never reached MySQL within the deadline. The due score moves with every
    // claim, so candidates are chosen by the reservation time inside each entry. The outbox only
    // holds unacknowledged reservations (seconds' worth in a healthy sale). Per outbox: the
    // shop's in the main database, and in each shard (whose entries are all homed there: one
    // release per voucher).
    for (const { shopId, shard } of reachableOutboxes(deps, outboxesOf(await registry()))) {
      if (!budget.fits(1 + closeCost(1))) return { closed, closedBeforeWrite, continued: true };
      const raw = (await outboxRedis(d, shard).hgetall<Record<string, unknown>>(keys.seckill.outbox(shopId))) ?? {};
      const expired: Reservation[] = Object.values(raw)
        .filter((v) => v !== null && v !== undefined)
        .map(parseReservation)
        .filter((r) => r.reservedAt < deadlineMs);
      const items = expired.map((r) => ({ id: r.orderId, unit: r.voucherId }));
      for (const chunk of voucherChunks(items, Math.max(1, vouchersThatFit(budget, 0, true, CLOSE_BATCH)))) {
        if (!budget.fits(closeCost(chunk.vouchers))) return { closed, closedBeforeWrite, continued: true };
        const res = await closeOrSkip(deps, () => closeOrders(d, chunk.ids, { shopId, shard, deadlineMs }));
        closed += res?.cancelled ?? 0;
        closedBeforeWrite += res?.cancelledBeforeWrite ?? 0;
      }
    }
  } catch (err) {
    // A call past the budget (a lock-conflict retry beyond the plan): stopped before it was sent.
    if (!(err instanceof SubrequestBudgetExceeded)) throw err;
    return { closed, closedBeforeWrite, continued: true };
  }
  return { closed, closedBeforeWrite };
}

/**
 * Reconcile: per seckill voucher in the registry (MySQL), compare Redis (stock, buyers, outbox)
 * with MySQL (stock, orders), repair what is safe to repair and store a report for
 * GET /admin/reconcile. It runs during live sales, so it never treats two reads taken at different
 * moments as one: it combines them only through facts each kept by one atomic step elsewhere —
 * sum(buckets) + |buyers| = initial in Redis; stock + active orders = initial in MySQL; order
 * states are monotone; and effects happen in one order (outbox entry → row committed → entry
 * acknowledged; cancellation committed → release). Consistent reads are one MySQL statement or one
 * Redis MULTI or script; the reasoning is written next to each step.
 * The facts in full: docs/modules.md "services/seckill/reconcile.ts".
 */
import type { Deps } from "../../deps.ts";
import { keys } from "../../redis/keys.ts";
import { scriptsFor } from "../../redis/scripts.ts";
import { parseSqlUtc, serviceDay } from "../../util/time.ts";
import { SubrequestBudgetExceeded } from "../../ports/subrequests.ts";
import { withLockRetry } from "./mysql-retry.ts";
import { releaseInRedis } from "./orders.ts";
import { allBucketKeys, reloadArgs, type SeckillConfig } from "./config.ts";
import { clearMovesTo, finishMoves, MOVES_IN_TTL_SECONDS, parseMove } from "./moves.ts";
import { homeShard, ShardUnavailable, shardCountOf, shardsOf, shareOf } from "./shards.ts";
import { registeredSeckills } from "./registry.ts";
import { ruleKeys } from "./rules.ts";
import { OrderStatus, type Reservation } from "./types.ts";

const parseReservation = (raw: unknown): Reservation =>
  (typeof raw === "string" ? JSON.parse(raw) : raw) as Reservation;

export interface VoucherReport {
  voucherId: number;
  shopId: number;
  initial: number;
  redisStock: number;
  buyers: number;
  /** Reservations in the outbox not yet in MySQL. */
  pending: number;
  mysqlStock: number;
  /** Orders holding a unit: unpaid, paid, used. */
  activeOrders: number;
  ok: boolean;
  drift: string[];
  repaired: string[];
  /** A sharded voucher's shards, each checked on its own (absent when unsharded). */
  shards?: ShardReport[];
}

/** One shard's part of a sharded voucher's report (`data.vouchers[].shards` of POST /admin/reconcile). */
export interface ShardReport {
  shard: number;
  /** The shard's share: its meta `initial` (moved with the stock). */
  initial: number;
  redisStock: number;
  buyers: number;
  pending: number;
  activeOrders: number;
  ok: boolean;
  drift: string[];
  repaired: string[];
}

export interface ReconcileReport {
  at: number;
  vouchers: VoucherReport[];
}

const ACTIVE: readonly number[] = [OrderStatus.unpaid, OrderStatus.paid, OrderStatus.used];

/**
 * A cancelled order whose release is missing from Redis is repaired (and reported) only once its
 * row has not changed for this long, seconds (MySQL's own clock, so app clock skew does not
 * matter). close releases right after its commit, so a younger one is almost surely a release in
 * flight: reporting it would be a false alarm and releasing it would race that close for nothing
 * (harmless — release is once per order — but noisy). A crash between commit and release is
 * therefore repaired by the first reconcile after this grace.
 */
export const RELEASE_GRACE_SECONDS = 30;

interface OrderFact {
  id: string;
  userId: string;
  status: number;
  /** Row unchanged for at least RELEASE_GRACE_SECONDS. */
  settled: boolean;
  /** create_time, epoch ms (= the reservation time: the daily limit's day for a release). */
  reservedAt: number;
}

const isActive = (o: OrderFact) => ACTIVE.includes(o.status);

/**
 * The MySQL repair of `stock = initial − active`. The detection read (one statement) is
 * consistent, but between it and a plain `UPDATE … SET stock = ?` writers and closes commit, and
 * an absolute value computed from the earlier read would undo them. So: lock the voucher row
 * first. Every writer and close changes that row in the same transaction as its order rows, so
 * while we hold it no transaction that changes the active count can commit. The count is a plain
 * (consistent, non-locking) read whose read view is created at that statement, i.e. after the lock
 * was granted: it sees every transaction that committed before us and none still running (those
 * wait for our lock). A locking count would instead take gap locks on the order index and
 * deadlock with inserting writers. No Redis call happens inside the transaction.
 */
async function repairMysqlStock(
  deps: Deps,
  voucherId: number,
  initial: number,
): Promise<{ stock: number; active: number; before: number | null }> {
  return await withLockRetry(deps, deps.isolate.orderGroups.lockConflicts, "reconcile MySQL stock", () =>
    deps.db.transaction(async (tx) => {
      const locked = (
        await tx.execute("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ? FOR UPDATE", [voucherId])
      ).rows[0] as { stock: number | string } | undefined;
      const stock = Number(locked?.stock ?? 0);
      const counted = (
        await tx.execute(`SELECT COUNT(*) AS n FROM tb_voucher_order WHERE voucher_id = ? AND status IN (?, ?, ?)`, [
          voucherId,
          ...ACTIVE,
        ])
      ).rows[0] as {
        n: number | string;
      };
      const active = Number(counted.n);
      const target = initial - active;
      // target < 0 is an oversell: no stock value is right; it is reported, never "repaired".
      if (!locked || target < 0 || stock === target) return { stock, active, before: null };
      await tx.execute("UPDATE tb_seckill_voucher SET stock = ? WHERE voucher_id = ?", [target, voucherId]);
      return { stock: target, active, before: stock };
    }),
  );
}

/**
 * One database's part of a voucher: the whole voucher when unsharded (`initial` = its stock, every
 * order), or one shard (`initial` = the shard's share, the orders of users homed there; MySQL's
 * stock is checked once per voucher, by the first shard's pass).
 */
interface View {
  redis: Deps["redis"];
  shard?: number;
  initial: number;
  mine: (userId: string) => boolean;
  checkMysql: boolean;
}

async function reconcileVoucher(deps: Deps, cfg: SeckillConfig): Promise<VoucherReport> {
  if (shardCountOf(cfg) === 0)
    return await reconcileView(deps, cfg, {
      redis: deps.redis,
      initial: cfg.initialStock,
      mine: () => true,
      checkMysql: true,
    });
  return await reconcileSharded(deps, cfg);
}

/**
 * A sharded voucher (shards.ts, moves.ts): first the moves a dead process left half-done are
 * finished; then each shard is reconciled like an unsharded voucher against its own share, its own
 * buyers' orders and its outbox; a shard whose keys are gone is reloaded with the share the others
 * leave of MySQL's stock (the moves toward it are cleared: that share accounts for them). Last, the
 * shares must add up to MySQL's initial stock — the source of truth: a deficit (a unit lost for
 * good in Redis) is given back to shard 0, a surplus is reported. That credit is once-only across
 * overlapping passes (a run may outlive its job lock): it applies only if shard 0's credit guard is
 * what the pass read with the shares, and every credit or reload changes the guard first.
 *
 * A shard database that fails (down, late, refusing) is reported as not reconciled and the others
 * are reconciled without it; what needs every shard at once — reloading a missing shard, the
 * shares' sum — waits for a pass that reaches them all.
 */
async function reconcileSharded(deps: Deps, cfg: SeckillConfig): Promise<VoucherReport> {
  const { voucherId, shopId } = cfg;
  const n = shardCountOf(cfg);
  const drift: string[] = [];
  const repaired: string[] = [];
  // Each step of finishing a move is once-only, so one stopped by a failing shard is finished by a later pass.
  const moves = await finishMoves(deps, cfg).catch((err: unknown) => {
    if (err instanceof SubrequestBudgetExceeded) throw err;
    drift.push(`stock moves left half-done not finished: ${errorText(err)}`);
    return { applied: 0, units: 0 };
  });
  if (moves.applied > 0) {
    drift.push(
      `${moves.applied} stock move(s) left half-done (${moves.units} unit(s) out of their shard, not in the next)`,
    );
    repaired.push(`finished ${moves.applied} move(s)`);
  }
  // What the shares leave of MySQL's stock, from two identical snapshots (moves in flight change
  // a snapshot: see sharesLeft), or null when they differ (the next pass decides).
  const [a, b] = [await sharesSnapshot(deps, cfg), await sharesSnapshot(deps, cfg)];
  const reachable = b.down.every((d) => d === null);
  const stable = reachable && JSON.stringify(a) === JSON.stringify(b);
  const left = stable ? sharesLeft(cfg, b) : null;
  const missing = b.known.map((v, i) => (v === null ? i : -1)).filter((i) => i >= 0);
  const reports: ShardReport[] = [];
  const notReconciled = (shard: number, why: string): ShardReport => ({
    shard,
    initial: b.known[shard] ?? 0,
    redisStock: 0,
    buyers: 0,
    pending: 0,
    activeOrders: 0,
    ok: false,
    drift: [`not reconciled: ${why}`],
    repaired: [],
  });
  // MySQL's stock is checked once per voucher, by the first shard whose pass gets through.
  let mysqlChecked = false;
  // A reload hands out what the shares leave, deficit included: a credit computed from earlier reads must fail.
  let guardMoved = false;
  for (const { shard, redis } of shardsOf(deps, cfg)) {
    const down = b.down[shard];
    if (down) {
      reports.push(notReconciled(shard, down));
      continue;
    }
    let initial = b.known[shard] ?? null;
    if (initial === null && left === null) {
      drift.push(
        reachable
          ? `shard ${shard}: voucher missing; not reloaded while stock moves between shards (next pass)`
          : `shard ${shard}: voucher missing; not reloaded while a shard is unreachable (next pass)`,
      );
      continue;
    }
    try {
      if (initial === null) {
        // Reloaded with what the others leave, split among the missing ones; the moves logged
        // toward it are part of that and are cleared.
        if (!guardMoved) await moveCreditGuard(deps, cfg, `reload:${deps.clock.now()}:${crypto.randomUUID()}`);
        guardMoved = true;
        await clearMovesTo(deps, cfg, shard);
        initial = Math.max(0, shareOf(left as number, missing.length, missing.indexOf(shard)));
      }
      const r = await reconcileView(deps, cfg, {
        redis,
        shard,
        initial,
        mine: (userId) => homeShard(userId, n) === shard,
        checkMysql: !mysqlChecked,
      });
      mysqlChecked = true;
      reports.push({
        shard,
        initial: r.initial,
        redisStock: r.redisStock,
        buyers: r.buyers,
        pending: r.pending,
        activeOrders: r.activeOrders,
        ok: r.ok,
        drift: r.drift,
        repaired: r.repaired,
      });
    } catch (err) {
      if (err instanceof SubrequestBudgetExceeded) throw err;
      reports.push(notReconciled(shard, errorText(err)));
    }
  }
  if (left !== null && missing.length === 0 && left !== 0) {
    drift.push(
      `shard shares (with moves in flight) add up to ${cfg.initialStock - left} ≠ MySQL initial ${cfg.initialStock}`,
    );
    // A deficit is units lost for good in Redis (MySQL is the truth): back into shard 0. A surplus
    // is not taken away (which units?): reported.
    if (left > 0) {
      const credited = await creditShard0(deps, cfg, left, b.guard);
      if (credited === 1) repaired.push(`gave ${left} lost unit(s) back to shard 0`);
      else if (credited === -2) drift.push("deficit not credited: another pass changed the shares meanwhile");
    }
  }
  const all = (f: (r: ShardReport) => number) => reports.reduce((x, r) => x + f(r), 0);
  const mysqlRow = (await deps.db.execute("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?", [voucherId]))
    .rows[0] as { stock: number | string } | undefined;
  return {
    voucherId,
    shopId,
    initial: cfg.initialStock,
    redisStock: all((r) => r.redisStock),
    buyers: all((r) => r.buyers),
    pending: all((r) => r.pending),
    mysqlStock: Number(mysqlRow?.stock ?? 0),
    activeOrders: all((r) => r.activeOrders),
    ok: drift.length === 0 && reports.every((r) => r.ok),
    drift: [...drift, ...reports.flatMap((r) => r.drift.map((d) => `shard ${r.shard}: ${d}`))],
    repaired: [...repaired, ...reports.flatMap((r) => r.repaired.map((d) => `shard ${r.shard}: ${d}`))],
    shards: reports,
  };
}

interface SharesSnapshot {
  /** Each shard's meta `initial` (null: not loaded). */
  known: (number | null)[];
  /** Moves logged by each shard: [id, to, units], sorted. */
  logs: [string, number, number][][];
  /** Move ids each shard applied, sorted. */
  applied: string[][];
  /** Per shard, why it could not be read (null: read). */
  down: (string | null)[];
  /** Shard 0's credit guard ("" when absent). */
  guard: string;
}

/** Per shard, one atomic read of its share, its move log and its applied moves; a shard that fails is marked down. */
async function sharesSnapshot(deps: Deps, cfg: SeckillConfig): Promise<SharesSnapshot> {
  const per = await Promise.all(
    shardsOf(deps, cfg).map(async ({ redis }) => {
      try {
        return { ...(await readShare(redis, cfg)), down: null };
      } catch (err) {
        if (err instanceof SubrequestBudgetExceeded) throw err;
        return { initial: null, log: [], applied: [], guard: "", down: errorText(err) };
      }
    }),
  );
  return {
    known: per.map((p) => p.initial),
    logs: per.map((p) => p.log),
    applied: per.map((p) => p.applied),
    down: per.map((p) => p.down),
    guard: per[0]?.guard ?? "",
  };
}

/** One shard's share, move log and applied moves, in one MULTI. */
async function readShare(
  redis: Deps["redis"],
  { shopId, voucherId }: SeckillConfig,
): Promise<{ initial: number | null; log: [string, number, number][]; applied: string[]; guard: string }> {
  const m = redis.multi();
  m.hget(keys.seckill.meta(shopId, voucherId), "initial");
  m.hgetall(keys.seckill.movesOut(shopId, voucherId));
  m.smembers(keys.seckill.movesIn(shopId, voucherId));
  m.get(keys.seckill.creditGuard(shopId, voucherId));
  const [initial, log, applied, guard] =
    await m.exec<[number | string | null, Record<string, string> | null, unknown[], string | number | null]>();
  const entries = Object.entries(log ?? {}).map(([id, v]): [string, number, number] => {
    const { to, units } = parseMove(v);
    return [id, to, units];
  });
  return {
    initial: initial === null || initial === undefined ? null : Number(initial),
    log: entries.sort(),
    applied: (applied ?? []).map(String).sort(),
    guard: guard === null || guard === undefined ? "" : String(guard),
  };
}

const errorText = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/**
 * MySQL's stock minus what the shards hold: the loaded shares plus the units of logged moves not
 * yet applied by a loaded recipient (out of the donor's share, not yet in the recipient's). Moves
 * toward a shard that is not loaded are left out (its reload takes what is left). Across shards
 * the reads are not one atomic step; a move that completes between them changes one of the two
 * snapshots, so only two identical snapshots are used (reconcileSharded).
 */
function sharesLeft(cfg: SeckillConfig, s: SharesSnapshot): number {
  let held = 0;
  for (const v of s.known) held += v ?? 0;
  s.logs.forEach((log) => {
    for (const [id, to, units] of log)
      if (s.known[to] !== null && s.known[to] !== undefined && !s.applied[to]?.includes(id)) held += units;
  });
  return cfg.initialStock - held;
}

/**
 * A deficit of the shares (units lost for good in Redis) back into shard 0, as a move-in guarded
 * by `guard`, shard 0's credit guard as this pass read it with the shares: 1 credited, -2 another
 * pass credited or reloaded since (nothing done), 0/-1 as lua/seckill-move-in.lua.
 */
async function creditShard0(deps: Deps, cfg: SeckillConfig, units: number, guard: string): Promise<number> {
  const { shopId, voucherId } = cfg;
  const redis = shardsOf(deps, cfg)[0]?.redis;
  if (!redis) return 0;
  return await scriptsFor(redis).seckillMoveIn.exec(
    [
      keys.seckill.meta(shopId, voucherId),
      keys.seckill.movesIn(shopId, voucherId),
      keys.seckill.stock(shopId, voucherId, 0),
      keys.seckill.creditGuard(shopId, voucherId),
    ],
    [`repair:${deps.clock.now()}:${crypto.randomUUID()}`, String(units), String(MOVES_IN_TTL_SECONDS), guard],
  );
}

/** Changes shard 0's credit guard, so no credit computed from reads before now applies. */
async function moveCreditGuard(deps: Deps, cfg: SeckillConfig, value: string): Promise<void> {
  const redis = shardsOf(deps, cfg)[0]?.redis;
  await redis?.set(keys.seckill.creditGuard(cfg.shopId, cfg.voucherId), value, { ex: MOVES_IN_TTL_SECONDS });
}

async function reconcileView(deps: Deps, cfg: SeckillConfig, view: View): Promise<VoucherReport> {
  const { shopId, voucherId } = cfg;
  const initial = view.initial;
  const redis = view.redis;
  // The view's database, for the helpers below (release, mark) that take deps.
  const vdeps: Deps = view.shard === undefined ? deps : { ...deps, redis };
  const drift: string[] = [];
  const repaired: string[] = [];
  const metaKey = keys.seckill.meta(shopId, voucherId);
  const buyersKey = keys.seckill.buyers(shopId, voucherId);
  const releasedKey = keys.seckill.released(shopId, voucherId);
  const outboxKey = keys.seckill.outbox(shopId);
  const bucketKeys = allBucketKeys(cfg);
  const scripts = scriptsFor(redis);

  // S1 — one atomic Redis snapshot: does the voucher exist, who are the buyers, what is pending.
  // Taken BEFORE the MySQL read on purpose: an entry absent here was acknowledged, so its row was
  // committed before S1 and the MySQL read below sees it.
  const s1 = redis.multi();
  s1.exists(metaKey);
  s1.smembers(buyersKey);
  s1.hgetall(outboxKey);
  const [metaExists, buyerMembers, outboxRaw] = await s1.exec<[number, unknown[], Record<string, unknown> | null]>();
  const buyersAtS1 = new Set((buyerMembers ?? []).map(String));
  const outboxAtS1 = Object.values(outboxRaw ?? {})
    .map(parseReservation)
    .filter((r) => r.voucherId === voucherId && view.mine(String(r.userId)));

  // T2 — one MySQL statement, hence one read view: the stock and every order of the voucher.
  const rows = (
    await deps.db.execute(
      `SELECT s.stock, o.id, o.user_id, o.status, o.create_time, o.update_time < NOW() - INTERVAL ? SECOND AS settled
         FROM tb_seckill_voucher s LEFT JOIN tb_voucher_order o ON o.voucher_id = s.voucher_id
        WHERE s.voucher_id = ?`,
      [RELEASE_GRACE_SECONDS, voucherId],
    )
  ).rows as {
    stock: number | string;
    id: string | null;
    user_id: string | number | null;
    status: number | string | null;
    create_time: string | null;
    settled: number | string | null;
  }[];
  let mysqlStock = Number(rows[0]?.stock ?? 0);
  const orders: OrderFact[] = rows
    .filter((r) => r.id !== null && r.id !== undefined && view.mine(String(r.user_id)))
    .map((r) => ({
      id: String(r.id),
      userId: String(r.user_id),
      status: Number(r.status),
      settled: Number(r.settled) === 1,
      reservedAt: parseSqlUtc(String(r.create_time)),
    }));
  const byId = new Map(orders.map((o) => [o.id, o]));
  let activeOrders = orders.filter(isActive).length;

  // MySQL: stock and active orders come from one read view, so a mismatch is real drift (a manual
  // edit, a bug), never a writer caught half-way.
  if (view.checkMysql) {
    // MySQL holds the whole voucher: its stock is checked against every active order (for a
    // shard's view, `activeOrders` counts only that shard's buyers).
    const allActive = rows.filter(
      (r) => r.id !== null && r.id !== undefined && ACTIVE.includes(Number(r.status)),
    ).length;
    const total = cfg.initialStock;
    if (allActive > total) drift.push(`oversold in MySQL: ${allActive} active orders for ${total} units`);
    if (mysqlStock + allActive !== total) {
      drift.push(`MySQL stock ${mysqlStock} + active orders ${allActive} ≠ initial ${total}`);
      const fixed = await repairMysqlStock(deps, voucherId, total);
      if (fixed.before !== null) repaired.push(`MySQL stock set to ${fixed.stock}`);
      mysqlStock = fixed.stock;
      if (view.shard === undefined) activeOrders = fixed.active;
    }
  }

  // Pending: reservations in the outbox at S1 whose row was not in MySQL at T2 (informational;
  // a write committing in between makes it an over-count of at most the in-flight writes).
  const pending = outboxAtS1.filter((r) => !byId.has(r.orderId)).length;

  // Who held a unit when read: every active order at T2, and every outbox entry at S1 that T2 does
  // not show as cancelled. Both reads are in the past by the time Redis is changed; the scripts
  // re-check each pair against the released set atomically (see lua/reconcile-buyers.lua).
  // With their reservation times (ms), which a reload puts back into the purchase-rule logs.
  const timedHolders: [string, string, number][] = [
    ...orders.filter(isActive).map((o): [string, string, number] => [o.id, o.userId, o.reservedAt]),
    ...outboxAtS1
      .filter((r) => byId.get(r.orderId) === undefined || isActive(byId.get(r.orderId) as OrderFact))
      .map((r): [string, string, number] => [r.orderId, String(r.userId), r.reservedAt]),
  ];
  const holders = timedHolders.map(([orderId, userId]): [string, string] => [orderId, userId]);

  if (!metaExists) {
    // Redis never got the voucher (creation-time load failed) or lost it. While meta is absent
    // no reservation can start (reserve-stock.lua answers NOT_FOUND first), so the only writers
    // racing the reload are closes/releases and acks, which reload-seckill.lua handles through
    // the released set. Orders not active at T2 are marked released: the rebuilt state already
    // leaves their units in stock and their users out of the buyers.
    drift.push("voucher missing in Redis");
    const settledOrders = orders.filter((o) => !isActive(o));
    const settledIds = settledOrders.map((o) => o.id);
    // Orders not active never count for a purchase rule again (states are monotone), but one
    // whose close died before its release still sits in its user's rule logs, and the reload
    // marks it released, so no later release would take it out: remove it here. ZREM by order id
    // is right at any moment, hence outside the reload's atomic step; done before it, so a crash
    // in between repeats both on the next pass.
    // The daily shop limit alike: a settled order leaves its user's daily set of its reservation
    // day (SREM by order id: a release that already took it out makes this a no-op, so nothing is
    // given back twice — the set lives outside the voucher's keys and survived their loss). A day
    // key still in the older integer-counter form answers WRONGTYPE and is left alone: a counter
    // cannot tell whether this order's release already counted it out, so it errs on the strict
    // side until it expires (within its day; see reserve-stock.lua).
    const stale = settledOrders.flatMap((o) =>
      ruleKeys(cfg, Number(o.userId)).map((log): [string, string, "zrem" | "srem"] => [log, o.id, "zrem"]),
    );
    if (cfg.dailyLimit > 0) {
      for (const o of settledOrders)
        stale.push([
          keys.seckill.daily(shopId, Number(o.userId), serviceDay(o.reservedAt, deps.config.SERVICE_TIME_ZONE)),
          o.id,
          "srem",
        ]);
    }
    for (let i = 0; i < stale.length; i += 500) {
      const p = redis.pipeline();
      for (const [key, id, op] of stale.slice(i, i + 500)) {
        if (op === "zrem") p.zrem(key, id);
        else p.srem(key, id);
      }
      const failed = (await p.exec({ keepErrors: true })).find((r) => r.error && !r.error.includes("WRONGTYPE"));
      if (failed) throw new Error(`reconcile: removing settled orders from quota keys failed: ${failed.error}`);
    }
    // Each holder's purchase-rule logs follow the buckets (none without rules).
    const [loaded, stock, buyers] = await scripts.reloadSeckill.exec(
      [
        metaKey,
        releasedKey,
        buyersKey,
        outboxKey,
        keys.seckill.outboxDue(shopId),
        ...bucketKeys,
        ...timedHolders.flatMap(([, userId]) => ruleKeys(cfg, Number(userId))),
      ],
      [
        ...reloadArgs(cfg, initial),
        String(settledIds.length),
        ...settledIds,
        ...timedHolders.flatMap(([orderId, userId, at]) => [orderId, userId, String(at)]),
      ],
    );
    if (loaded === 1) {
      // The legacy registry set is not under the shop's hash tag, so it cannot be in the script.
      await deps.redis.sadd(keys.seckill.active(), `${shopId}:${voucherId}`);
      repaired.push(`voucher reloaded into Redis from MySQL: stock ${stock}, ${buyers} buyer(s)`);
    } else {
      repaired.push("voucher was loaded meanwhile; checked again on the next pass");
    }
    return {
      voucherId,
      shopId,
      initial,
      redisStock: stock,
      buyers,
      pending,
      mysqlStock,
      activeOrders,
      ok: false,
      drift,
      repaired,
    };
  }

  // Cancelled orders whose unit never went back to Redis (a crash between the close's commit and
  // its release). Only settled rows (see RELEASE_GRACE_SECONDS): a younger one is a release in
  // flight, not drift. Membership is read after T2, so an order the close released meanwhile is
  // seen as released and skipped.
  const cancelled = orders.filter((o) => !isActive(o) && o.settled);
  if (cancelled.length > 0) {
    const flags = await redis.smismember(
      releasedKey,
      cancelled.map((o) => o.id),
    );
    const unreleased = cancelled.filter((_, i) => flags[i] !== 1);
    let released = 0;
    let marked = 0;
    for (const o of unreleased) {
      // A full release (INCR + SREM) is right only if the buyer's membership is this order's:
      // the user is a buyer at S1 and has no other holding (no active order at T2, no other
      // outbox entry at S1) — and, being a buyer, cannot take a new one before our SREM. Otherwise
      // (the released set was lost, or the buyers set lost this user) the unit is not held in
      // Redis any more or belongs to another reservation of the user: record the order as
      // released without touching stock or buyers; a stock/buyers mismatch this leaves is real
      // drift and is repaired atomically below.
      const other =
        orders.some((x) => x.userId === o.userId && x.id !== o.id && isActive(x)) ||
        outboxAtS1.some((r) => String(r.userId) === o.userId && r.orderId !== o.id);
      if (buyersAtS1.has(o.userId) && !other) {
        if (
          await releaseInRedis(vdeps, { orderId: o.id, userId: Number(o.userId), voucherId, reservedAt: o.reservedAt })
        )
          released++;
      } else {
        // The order is cancelled either way, so it gives back its quotas — its purchase-rule log
        // entries and its daily shop counter (an earlier version kept the counter) — in the same atomic,
        // once-only step as the mark, so a crash cannot leave it marked released while still
        // holding quota (lua/mark-released.lua).
        const day = serviceDay(o.reservedAt, deps.config.SERVICE_TIME_ZONE);
        const added = await scripts.markReleased.exec(
          [releasedKey, keys.seckill.daily(shopId, Number(o.userId), day), ...ruleKeys(cfg, Number(o.userId))],
          [o.id, cfg.dailyLimit > 0 ? "1" : "0"],
        );
        if (added === 1) marked++;
      }
    }
    if (released + marked > 0) {
      drift.push(`${released + marked} cancelled order(s) not released in Redis`);
      if (released > 0) repaired.push(`released ${released} unit(s) in Redis`);
      if (marked > 0) repaired.push(`marked ${marked} order(s) released (their buyer held no unit for them)`);
    }
  }

  // Buyers with a holding missing from the set, and the Redis invariant, in one atomic step. Only
  // pairs whose user was not a buyer at S1 are sent: a user who was a buyer at S1 and is not now
  // was released in between (or lost after S1: the next pass sees it).
  const missing = holders.filter(([, userId]) => !buyersAtS1.has(userId));
  const [readded, stockNow, buyersNow] = await scripts.reconcileBuyers.exec(
    [releasedKey, buyersKey, ...bucketKeys],
    missing.flat(),
  );
  if (readded > 0) {
    // Real drift, not a race: a user leaves the set only through a release (which marks its order
    // released, so the script would not re-add it) or through data loss.
    drift.push(`${readded} buyer(s) with orders missing from Redis`);
    repaired.push(`re-added ${readded} buyer(s)`);
  }
  let redisStock = stockNow;
  const buyers = buyersNow;
  // Both numbers come from the same atomic step, and every reservation/release keeps their sum,
  // so a mismatch is real drift (a lost or edited key). reset-stock.lua recomputes stock from
  // |buyers| in one step; the drift cannot change between the check and the reset, since every
  // step in between keeps the sum.
  if (view.shard !== undefined) {
    // A shard's share moves with its stock (moves.ts), so it is read with the check, in the script.
    const [before, after, changed] = await scripts.resetStock.exec([buyersKey, ...bucketKeys, metaKey], ["0", "meta"]);
    if (changed === 1) {
      drift.push(`Redis stock ${before} + buyers ${buyers} ≠ the shard's share`);
      repaired.push(`Redis stock set to ${after}`);
      redisStock = after;
    }
  } else if (redisStock + buyers !== initial) {
    drift.push(`Redis stock ${redisStock} + buyers ${buyers} ≠ initial ${initial}`);
    const [, after] = await scripts.resetStock.exec([buyersKey, ...bucketKeys], [String(initial)]);
    repaired.push(`Redis stock set to ${after}`);
    redisStock = after;
  }

  const orphans = await buyersWithoutUnit(vdeps, cfg, buyersAtS1, outboxAtS1, orders);
  if (orphans.length > 0) {
    // Not repaired automatically: which unit to give back is an operator's call (a manual SADD,
    // or a buyer whose order was lost). Reported with the user ids.
    drift.push(
      `${orphans.length} buyer(s) without an order or a pending reservation: ${orphans.slice(0, 20).join(", ")}`,
    );
  }
  return {
    voucherId,
    shopId,
    initial,
    redisStock,
    buyers,
    pending,
    mysqlStock,
    activeOrders,
    ok: drift.length === 0,
    drift,
    repaired,
  };
}

/**
 * Users in the buyers set that hold nothing — no outbox entry, no active order, no cancelled order
 * whose release is still to come — so one-order-per-user blocks them for no unit. Counting
 * (|buyers| vs active + pending) from reads taken at different moments raises false alarms in a
 * live sale, so each suspect is confirmed by S3 (atomic Redis read) then T4 (MySQL), and flagged
 * only if at S3 it is a buyer, has no outbox entry, every order T2 knew of it is released, and at
 * T4 it has exactly those orders, none active. Proof that a flagged user held nothing at S3: a
 * holding at S3 is (i) an outbox entry — seen by S3; (ii) an active order — committed before S3
 * hence visible at T4, where it is either still active or was active at T2 (states are monotone),
 * so it is not among T2's non-active orders: either way T4 differs; (iii) a cancelled order not
 * yet released — its row predates S3, so it is either among T2's orders (then S3 sees it not
 * released) or a new row at T4. Holding nothing is stable (no release is due; a buyer cannot
 * reserve again), so the flag stays true after S3.
 */
async function buyersWithoutUnit(
  deps: Deps,
  cfg: SeckillConfig,
  buyersAtS1: Set<string>,
  outboxAtS1: Reservation[],
  orders: OrderFact[],
): Promise<string[]> {
  const { shopId, voucherId } = cfg;
  const pendingUsers = new Set(outboxAtS1.map((r) => String(r.userId)));
  const activeUsers = new Set(orders.filter(isActive).map((o) => o.userId));
  const suspects = [...buyersAtS1].filter((u) => !pendingUsers.has(u) && !activeUsers.has(u));
  if (suspects.length === 0) return [];
  const known = new Map<string, string[]>(suspects.map((u) => [u, []]));
  for (const o of orders) known.get(o.userId)?.push(o.id);
  const knownIds = [...known.values()].flat();

  // S3 — atomic: still a buyer? T2's orders released? any outbox entry now?
  const s3 = deps.redis.multi();
  s3.smismember(keys.seckill.buyers(shopId, voucherId), suspects);
  if (knownIds.length > 0) s3.smismember(keys.seckill.released(shopId, voucherId), knownIds);
  s3.hgetall(keys.seckill.outbox(shopId));
  const res = await s3.exec<unknown[]>();
  const stillBuyer = res[0] as number[];
  const releasedFlags = knownIds.length > 0 ? (res[1] as number[]) : [];
  const outboxNow = Object.values((res[knownIds.length > 0 ? 2 : 1] as Record<string, unknown> | null) ?? {}).map(
    parseReservation,
  );
  const released = new Set(knownIds.filter((_, i) => releasedFlags[i] === 1));
  const pendingNow = new Set(outboxNow.filter((r) => r.voucherId === voucherId).map((r) => String(r.userId)));
  const confirmed = suspects.filter(
    (u, i) => stillBuyer[i] === 1 && !pendingNow.has(u) && (known.get(u) ?? []).every((id) => released.has(id)),
  );
  if (confirmed.length === 0) return [];

  // T4 — MySQL after S3: the same orders, none active.
  const later = (
    await deps.db.execute(
      `SELECT id, user_id, status FROM tb_voucher_order WHERE voucher_id = ? AND user_id IN (${confirmed.map(() => "?").join(", ")})`,
      [voucherId, ...confirmed.map((u) => BigInt(u))],
    )
  ).rows as { id: string; user_id: string | number; status: number | string }[];
  return confirmed.filter((u) => {
    const now = later.filter((r) => String(r.user_id) === u);
    const before = new Set(known.get(u) ?? []);
    return (
      now.length === before.size && now.every((r) => before.has(String(r.id)) && !ACTIVE.includes(Number(r.status)))
    );
  });
}

export async function reconcile(deps: Deps, now: number): Promise<ReconcileReport> {
  const vouchers: VoucherReport[] = [];
  for (const cfg of await registeredSeckills(deps, now)) {
    try {
      vouchers.push(await reconcileVoucher(deps, cfg));
    } catch (err) {
      // One voucher that cannot be reconciled (its shards are not configured here, a database is
      // down) is reported; the others are still reconciled. Past the run's subrequest share the
      // pass ends (runCron: the next run starts over).
      if (err instanceof SubrequestBudgetExceeded) throw err;
      if (!(err instanceof ShardUnavailable))
        deps.log.warn("reconcile: voucher not reconciled", { voucherId: cfg.voucherId, err });
      const { voucherId, shopId, initialStock: initial } = cfg;
      vouchers.push({
        voucherId,
        shopId,
        initial,
        redisStock: 0,
        buyers: 0,
        pending: 0,
        mysqlStock: 0,
        activeOrders: 0,
        ok: false,
        drift: [`not reconciled: ${errorText(err)}`],
        repaired: [],
      });
    }
  }
  const report: ReconcileReport = { at: now, vouchers };
  await deps.redis.set(keys.seckill.reconcileReport(), JSON.stringify(report));
  return report;
}

/**
 * The order writer: turns a shop's outbox into MySQL rows, a group at a time (QStash drain
 * message → ORDER_DRAIN_PATH → drainShop). Per group of up to ORDER_GROUP_MAX reservations claimed
 * in one command: per voucher one transaction — a multi-row `INSERT IGNORE` keyed by order id and
 * ONE stock update for the rows inserted (`stock = stock - n WHERE stock >= n`) — then one command
 * acknowledges the group and one delayed close message covers it.
 * Invariants: redelivery, a re-claimed group or a concurrent writer inserts nothing twice; no MySQL
 * transaction is open while Redis or QStash is called; a crash leaves the entries claimable after
 * the lease. A delivery stops at its subrequest budget or ORDER_DRAIN_BUDGET_MS and hands the rest
 * on. Sharded vouchers: docs/modules.md "services/seckill/writer.ts".
 */
import type { Deps, RedisPort } from "../../deps.ts";
import {
  closeMessage,
  DRAIN_WINDOW_MS,
  drainMessage,
  drainNowMessage,
  type QueueMessage,
} from "../../queue/messages.ts";
import { keys } from "../../redis/keys.ts";
import { metered, SubrequestBudget, SubrequestBudgetExceeded } from "../../ports/subrequests.ts";
import { toSqlUtc } from "../../util/time.ts";
import { closeVouchersPerInvocation } from "./close.ts";
import { withLockRetry } from "./mysql-retry.ts";
import { ackGroup, claimGroup, outboxRedis } from "./outbox.ts";
import { OrderStatus, type Reservation } from "./types.ts";

export class OversellError extends Error {
  constructor(voucherId: number, wanted: number) {
    super(`MySQL stock of voucher ${voucherId} cannot cover ${wanted} new order(s)`);
    this.name = "OversellError";
  }
}

type Tx = Pick<Deps["db"], "execute">;

/** Multi-row INSERT IGNORE of one voucher's reservations; returns the number of rows inserted. */
export async function insertOrdersTx(
  tx: Tx,
  rs: readonly Reservation[],
  status: number,
  payTimeMs: number | null,
): Promise<number> {
  if (rs.length === 0) return 0;
  const values = rs.map(() => "(?, ?, ?, ?, ?, ?)").join(", ");
  const args = rs.flatMap((r) => [
    BigInt(r.orderId),
    r.userId,
    r.voucherId,
    status,
    toSqlUtc(r.reservedAt),
    payTimeMs === null ? null : toSqlUtc(payTimeMs),
  ]);
  const ins = await tx.execute(
    `INSERT IGNORE INTO tb_voucher_order (id, user_id, voucher_id, status, create_time, pay_time) VALUES ${values}`,
    args,
  );
  return ins.rowsAffected;
}

/**
 * Inserts one voucher's reservations and takes the inserted count from MySQL stock, in the caller's
 * transaction. Throws OversellError (the transaction rolls back) if MySQL cannot cover them:
 * Redis admitted more than MySQL holds, which must never be recorded.
 */
export async function writeVoucherRowsTx(
  tx: Tx,
  voucherId: number,
  rs: readonly Reservation[],
  status: number,
  payTimeMs: number | null,
): Promise<number> {
  const inserted = await insertOrdersTx(tx, rs, status, payTimeMs);
  if (inserted === 0) return 0;
  const upd = await tx.execute("UPDATE tb_seckill_voucher SET stock = stock - ? WHERE voucher_id = ? AND stock >= ?", [
    inserted,
    voucherId,
    inserted,
  ]);
  if (upd.rowsAffected !== 1) throw new OversellError(voucherId, inserted);
  return inserted;
}

export interface GroupWrite {
  created: number;
  existed: number;
  /** Order ids now in MySQL (created or already there): safe to acknowledge. */
  written: string[];
  /** Order ids NOT written (oversell refused): left in the outbox for an operator / reconcile. */
  refused: string[];
}

function byVoucher(rs: readonly Reservation[]): Map<number, Reservation[]> {
  const m = new Map<number, Reservation[]>();
  for (const r of rs) {
    let list = m.get(r.voucherId);
    if (!list) m.set(r.voucherId, (list = []));
    list.push(r);
  }
  return m;
}

/** Writes a group to MySQL: one transaction per voucher, lock conflicts retried. */
export async function writeGroup(deps: Deps, rs: readonly Reservation[]): Promise<GroupWrite> {
  const out: GroupWrite = { created: 0, existed: 0, written: [], refused: [] };
  for (const [voucherId, list] of byVoucher(rs)) {
    try {
      const created = await withLockRetry(deps, deps.isolate.orderGroups.lockConflicts, "write orders", () =>
        deps.db.transaction((tx) => writeVoucherRowsTx(tx, voucherId, list, OrderStatus.unpaid, null)),
      );
      out.created += created;
      out.existed += list.length - created;
      // Rows that already existed: the same reservations written before (redelivery, a re-claimed
      // group) — or, if an id ever collided, someone else's order, which must not be acknowledged
      // as this one (its buyer would silently hold nothing). One SELECT, only on this path.
      const foreign = created < list.length ? await foreignRows(deps, list) : new Set<string>();
      for (const r of list) (foreign.has(r.orderId) ? out.refused : out.written).push(r.orderId);
      if (foreign.size > 0)
        deps.log.error(
          "order id collision: a row with this id belongs to another reservation; the entry stays in the outbox",
          { voucherId, orderIds: [...foreign] },
        );
    } catch (err) {
      if (!(err instanceof OversellError)) throw err;
      deps.log.error("oversell refused: reservations stay in the outbox", { voucherId, orders: list.length, err });
      for (const r of list) out.refused.push(r.orderId);
    }
  }
  return out;
}

/** Ids of `rs` whose MySQL row is another user's or another voucher's. */
async function foreignRows(deps: Deps, rs: readonly Reservation[]): Promise<Set<string>> {
  const rows = (
    await deps.db.execute(
      `SELECT id, user_id, voucher_id FROM tb_voucher_order WHERE id IN (${rs.map(() => "?").join(", ")})`,
      rs.map((r) => BigInt(r.orderId)),
    )
  ).rows as {
    id: string | number;
    user_id: string | number;
    voucher_id: string | number;
  }[];
  const byId = new Map(rows.map((row) => [String(row.id), row]));
  const out = new Set<string>();
  for (const r of rs) {
    const row = byId.get(r.orderId);
    if (row && (Number(row.user_id) !== r.userId || Number(row.voucher_id) !== r.voucherId)) out.add(r.orderId);
  }
  return out;
}

/** Makes claimed entries of the outbox in `redis` claimable again now (one command). */
async function releaseClaim(
  redis: RedisPort,
  now: number,
  shopId: number,
  group: readonly Reservation[],
): Promise<void> {
  const [first, ...rest] = group.map((r) => ({ score: now, member: r.orderId }));
  if (first) await redis.zadd(keys.seckill.outboxDue(shopId), { xx: true }, first, ...rest);
}

/**
 * Subrequests (src/ports/subrequests.ts) of one group spanning `vouchers` vouchers: the claim (one
 * script), one transaction per voucher (BEGIN, INSERT, UPDATE, COMMIT), the ack (one script) and
 * its close messages (one batch) — measured in tests/jobs/subrequests.test.ts. A lock conflict
 * retried costs another TX_COST.
 */
export const CLAIM_COST = 1;
export const TX_COST = 4;
export function groupCost(vouchers: number): number {
  return CLAIM_COST + TX_COST * vouchers + 2;
}
/** The drain's last call: the continuation, or the next window's announcement (one batch). */
const TAIL_COST = 1;

/**
 * The close messages of a written group: one per at most closeVouchersPerInvocation vouchers, so
 * that each close delivery fits one invocation's subrequests (close costs per voucher, not per
 * order: close.ts closeCost). Almost always one message; all go out in one batch.
 */
function closeMessagesOf(
  deps: Deps,
  shopId: number,
  written: readonly Reservation[],
  shard: number | undefined,
): QueueMessage[] {
  const per = closeVouchersPerInvocation(deps);
  const lists = [...byVoucher(written).values()];
  const out: QueueMessage[] = [];
  for (let i = 0; i < lists.length; i += per)
    out.push(
      closeMessage(
        deps,
        shopId,
        lists
          .slice(i, i + per)
          .flat()
          .map((r) => r.orderId),
        shard,
      ),
    );
  return out;
}

export interface DrainResult {
  groups: number;
  created: number;
  existed: number;
  refused: number;
  /** True when the time or subrequest budget ran out with entries left (a follow-up drain was published). */
  continued: boolean;
  /** Which budget ended the delivery, when one did. */
  stoppedBy?: "time" | "subrequests";
  /** Subrequests this delivery made through its meter (src/ports/subrequests.ts). */
  subrequests: number;
}

/**
 * Groups one drain delivery works on at the same time ("lanes"), each lane claiming, writing,
 * acknowledging and closing a group after the other.
 *
 * Decided by the bench (npm run bench, group "writer", row writer-drain-delivered: 10,000
 * reservations of one voucher, rows/s from the drain's delivery to the last row in MySQL, 2-core
 * box shared with the Upstash/PlanetScale/QStash stand-ins, 4–5 rounds per setting, paired with the
 * raw 500-row INSERT baseline at ~60–98k rows/s):
 *   - one lane, groups of 500: 31–34k rows/s (ratio 0.39–0.53). A group took ~14 ms from claim to
 *     close publish, of which only ~4.3 ms was the INSERT; the claim (~2.5 ms), the ack (~1.5 ms),
 *     BEGIN/UPDATE/COMMIT (~2.3 ms), the close publish (~0.8 ms) and the app's own CPU (JSON, SQL
 *     formatting, ~2–3 ms) are each a wait on another process, during which MySQL sat idle;
 *   - two lanes, groups of 500: 37–44k rows/s (0.46–0.60); three lanes: 41k (0.61) — the third
 *     lane adds little on two cores and more contention on the stock row;
 *   - groups of 1000 (ORDER_GROUP_MAX, src/env.ts): one lane 46k (0.52), two lanes 50–55k rows/s
 *     (0.60–0.61) and less CPU per order (55 vs 62–68 µs); groups of 2000 were no better than 1000
 *     and noisier (38–47k).
 * Hence two lanes and groups of 1000. Lanes never share a group (claims are disjoint under their
 * lease); each group keeps its own transaction, ack-after-commit and close. Concurrent groups of
 * one voucher only meet on the voucher's stock row, held for one UPDATE → COMMIT round trip; a
 * conflict there is retried like any other (withLockRetry) — none was seen in the bench.
 */
export const DRAIN_LANES = 2;

/**
 * Drains a shop's outbox: claim a group, write it, acknowledge it, publish its delayed close;
 * repeat until fewer than a full group is due or a budget is spent, DRAIN_LANES groups at a time.
 * Only entries that exist in the outbox are written: the message that triggered this names a
 * shop, nothing more.
 *
 * Two budgets end a delivery early and hand the rest to a fresh one (a continuation drain):
 * ORDER_DRAIN_BUDGET_MS of wall time, and the invocation's subrequests (WORKERS_SUBREQUEST_LIMIT
 * minus headroom; src/ports/subrequests.ts). Every call goes through a meter; a lane starts a group
 * only when the group's worst case (groupCost of the most vouchers a group had so far, at least
 * one) still fits beside the other lane's and the final publish. Once claimed, a group spanning
 * more vouchers than fit is written voucher by voucher as far as the budget goes; the rest of it is
 * handed back (claimable at once) for the continuation. So one delivery makes at most
 * `invocationCap` metered subrequests whatever the backlog (a lock-conflict retry past the cap is
 * refused, its group handed back).
 *
 * `shard` names the outbox: the shop's in that seckill shard (a sharded voucher's buyers homed
 * there), or without it the shop's in the main database, as before shards. A shard this
 * deployment does not configure throws ShardNotConfigured before any call (the delivery fails and
 * QStash retries it, then dead-letters it for an operator: shards are never removed under live vouchers).
 */
export async function drainShop(
  deps: Deps,
  shopId: number,
  opts: { budgetMs?: number; subrequests?: SubrequestBudget; shard?: number } = {},
): Promise<DrainResult> {
  const c = deps.config;
  const { shard } = opts;
  // Unmetered (hand-backs are forced from the headroom) and metered clients of the outbox's database.
  const outbox = outboxRedis(deps, shard);
  const started = deps.clock.now();
  const budget = opts.budgetMs ?? c.ORDER_DRAIN_BUDGET_MS;
  const calls = opts.subrequests ?? SubrequestBudget.forInvocation(deps);
  const d = metered(deps, calls);
  const dOutbox = { redis: outboxRedis(d, shard) };
  const res: DrainResult = { groups: 0, created: 0, existed: 0, refused: 0, continued: false, subrequests: 0 };
  /** Set when a lane saw the outbox run dry (a short or empty claim), spent a budget, or failed. */
  let done = false;
  let stoppedBy: DrainResult["stoppedBy"];
  const stop = (why: NonNullable<DrainResult["stoppedBy"]>) => {
    done = true;
    stoppedBy ??= why;
  };
  /** The most vouchers one group of this delivery spanned: the next group's planned worst case. */
  let vouchersPerGroup = 1;
  // The final publish is held from the start: a delivery that stops early can always hand on.
  calls.hold(TAIL_COST);
  /** Hands claimed entries back outside the meter (one command from the headroom): a failure path. */
  const handBack = async (group: readonly Reservation[]) => {
    calls.force(1);
    await releaseClaim(outbox, deps.clock.now(), shopId, group).catch((e: unknown) =>
      deps.log.warn("could not hand back a claimed group; its lease will run out", { shopId, shard, err: e }),
    );
  };
  const lane = async (): Promise<void> => {
    try {
      await laneLoop();
    } catch (err) {
      done = true;
      throw err;
    }
  };
  const laneLoop = async (): Promise<void> => {
    while (!done) {
      const planned = groupCost(vouchersPerGroup);
      if (!calls.hold(planned)) {
        stop("subrequests");
        break;
      }
      let group: Reservation[];
      try {
        group = await claimGroup(dOutbox, shopId, deps.clock.now(), c.ORDER_GROUP_MAX, c.ORDER_CLAIM_LEASE_MS);
      } catch (err) {
        calls.unhold(planned);
        if (err instanceof SubrequestBudgetExceeded) {
          stop("subrequests");
          break;
        }
        throw err;
      }
      calls.unhold(planned);
      if (group.length === 0) {
        done = true;
        break;
      }
      const lists = [...byVoucher(group).values()];
      vouchersPerGroup = Math.max(vouchersPerGroup, lists.length);
      // What the rest of this group costs with its first k vouchers written (+1: handing back the others).
      const rest = (k: number) => TX_COST * k + 2 + (k < lists.length ? 1 : 0);
      let k = lists.length;
      while (k > 0 && !calls.fits(rest(k))) k--;
      if (k === 0) {
        await handBack(group);
        stop("subrequests");
        break;
      }
      const held = rest(k);
      calls.hold(held);
      const now = lists.slice(0, k).flat();
      let written: GroupWrite | undefined;
      try {
        if (k < lists.length) {
          // More vouchers than this delivery can still write: the others go back for the continuation.
          await releaseClaim(dOutbox.redis, deps.clock.now(), shopId, lists.slice(k).flat());
          stop("subrequests");
        }
        try {
          written = await writeGroup(d, now);
        } catch (err) {
          // The write failed in this process (MySQL down, conflicts outlasting the retries, the
          // budget refusing a retry): hand the group back at once so the next delivery (QStash's
          // retry, or the continuation) can claim it again, instead of it waiting out the lease.
          // (A writer that dies here leaves the lease to run out.)
          await handBack(now);
          if (err instanceof SubrequestBudgetExceeded) {
            stop("subrequests");
            break;
          }
          throw err;
        }
        const w = written;
        res.groups++;
        res.created += w.created;
        res.existed += w.existed;
        res.refused += w.refused.length;
        await ackGroup(dOutbox, shopId, w.written);
        // Best effort: if this publish is lost, the close-expired job closes these orders at their
        // deadline from MySQL. Acknowledged first, so a crash here costs no second write.
        if (w.written.length > 0) {
          const ids = new Set(w.written);
          try {
            await d.queue.batchJSON(
              closeMessagesOf(
                deps,
                shopId,
                now.filter((r) => ids.has(r.orderId)),
                shard,
              ),
            );
            deps.isolate.orderGroups.stats.closePublishes++;
          } catch (err) {
            if (err instanceof SubrequestBudgetExceeded) stop("subrequests");
            deps.log.warn("close publish failed; close-expired will close the group at its deadline", {
              shopId,
              shard,
              orders: w.written.length,
              err,
            });
          }
        }
      } catch (err) {
        // The hand-back of a partial group or the ack: for the ack, the rows are in MySQL and the
        // entries stay claimed until their lease runs out, then are written again as no-ops
        // (INSERT IGNORE); other errors fail the delivery (QStash retries it), as before.
        if (!(err instanceof SubrequestBudgetExceeded)) throw err;
        stop("subrequests");
        break;
      } finally {
        calls.unhold(held);
      }
      if (group.length < c.ORDER_GROUP_MAX) done = true;
      else if (!done && deps.clock.now() - started >= budget) stop("time");
    }
  };
  // Every lane finishes (acks) the group it holds before the delivery answers; the first failure wins.
  const settled = await Promise.allSettled(Array.from({ length: DRAIN_LANES }, lane));
  const failure = settled.find((r): r is PromiseRejectedResult => r.status === "rejected");
  if (failure) throw failure.reason;
  calls.unhold(TAIL_COST);
  if (stoppedBy !== undefined) {
    // More is due than one delivery should take: hand the rest to a fresh delivery.
    await d.queue.batchJSON([drainNowMessage(deps, shopId, `cont-${deps.clock.now()}`, shard)]);
    deps.isolate.orderGroups.stats.drainPublishes++;
    res.continued = true;
    res.stoppedBy = stoppedBy;
  }
  deps.isolate.orderGroups.stats.drained += res.created;
  if (res.groups > 0 && !res.continued) {
    // Found work: announce the next window (same deduplication id the isolates use for it, so a
    // busy sale still gets one drain per window). Catches reservations an isolate with a skewed
    // clock filed under a window that was drained already; a quiet window ends the chain.
    const next = Math.floor(deps.clock.now() / DRAIN_WINDOW_MS) + 1;
    try {
      await d.queue.batchJSON([drainMessage(deps, shopId, next, shard)]);
      deps.isolate.orderGroups.stats.drainPublishes++;
    } catch (err) {
      deps.log.warn("follow-up drain publish failed; the sweep covers stragglers", { shopId, shard, err });
    }
  }
  res.subrequests = calls.spent;
  return res;
}

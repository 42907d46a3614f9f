/**
 * The order jobs (every minute, each under its own lock — see jobs/index.ts):
 * - sweepOutbox: for each shop whose outbox holds entries overdue by OUTBOX_REPUBLISH_AFTER_SECONDS
 *   (drain message lost, writer down, a claimed group whose writer died), publish ONE drain message,
 *   deduplicated per shop and minute. The writer then claims the overdue entries in groups. The
 *   cost is one Redis command per shop and at most one QStash message per shop per minute, however
 *   large the backlog and however slow QStash is: a sweep never multiplies what it re-sends.
 * - closeExpired: close unpaid orders past their payment deadline, and reservations that never
 *   reached MySQL within it — the fallback when a delayed close message is lost — in groups.
 * Reconcile lives in services/seckill/reconcile.ts.
 */
import type { Deps } from "../deps.ts";
import { drainNowMessage } from "../queue/orders.ts";
import { keys } from "../redis/keys.ts";
import { toSqlUtc } from "../util/time.ts";
import { closeOrders } from "../services/seckill/close.ts";
import { parseReservation } from "../services/seckill/outbox.ts";
import { registeredSeckills, shopsOf } from "../services/seckill/registry.ts";
import { OrderStatus } from "../services/seckill/types.ts";

/** Orders per close-expired group (one MySQL scan page). */
const CLOSE_BATCH = 500;

export interface SweepResult {
  /** Overdue outbox entries seen, over all shops. */
  overdue: number;
  /** Drain messages published (one per shop with overdue entries). */
  drains: number;
}

export async function sweepOutbox(deps: Deps, now: number): Promise<SweepResult> {
  // Never ahead of the clock the writer claims by: a drain for entries still under a claim lease
  // would find nothing, and its deduplication id would hold back the next sweep's for a minute.
  const cutoff = Math.min(now - deps.config.OUTBOX_REPUBLISH_AFTER_SECONDS * 1000, deps.clock.now());
  const shops = shopsOf(await registeredSeckills(deps, now));
  let overdue = 0;
  const messages = [];
  for (const shopId of shops) {
    const n = await deps.redis.zcount(keys.seckill.outboxDue(shopId), "-inf", cutoff);
    if (n === 0) continue;
    overdue += n;
    // No delay: these entries are due already. The id names the minute, so overlapping sweeps
    // (two isolates, a retried cron) publish one drain between them.
    messages.push(drainNowMessage(deps, shopId, `sweep-${Math.floor(now / 60_000)}`));
  }
  if (messages.length > 0) await deps.queue.batchJSON(messages);
  return { overdue, drains: messages.length };
}

export interface CloseExpiredResult {
  closed: number;
  closedBeforeWrite: number;
}

export async function closeExpired(deps: Deps, now: number): Promise<CloseExpiredResult> {
  const deadlineMs = now - deps.config.ORDER_PAY_TIMEOUT_SECONDS * 1000;
  let closed = 0;
  let closedBeforeWrite = 0;
  // MySQL rows still unpaid after the deadline (served by idx_status_create), a group per page.
  let after = "0";
  for (;;) {
    const rows = (await deps.db.execute("SELECT id FROM tb_voucher_order WHERE status = ? AND create_time < ? AND id > ? ORDER BY id LIMIT ?", [
      OrderStatus.unpaid,
      toSqlUtc(deadlineMs),
      BigInt(after),
      CLOSE_BATCH,
    ])).rows as { id: string }[];
    if (rows.length === 0) break;
    const res = await closeOrders(deps, rows.map((r) => String(r.id)), { deadlineMs });
    closed += res.cancelled;
    // Keyset paging: an order paid meanwhile stays unpaid-looking to nobody, and one that cannot
    // be closed now is not fetched again in this pass.
    after = String(rows[rows.length - 1]?.id);
    if (rows.length < CLOSE_BATCH) break;
  }
  // Reservations that never reached MySQL within the deadline. The due score moves with every
  // claim, so candidates are chosen by the reservation time inside each entry. The outbox only
  // holds unacknowledged reservations (seconds' worth in a healthy sale).
  for (const shopId of shopsOf(await registeredSeckills(deps, now))) {
    const raw = (await deps.redis.hgetall<Record<string, unknown>>(keys.seckill.outbox(shopId))) ?? {};
    const expired = Object.values(raw)
      .filter((v) => v !== null && v !== undefined)
      .map(parseReservation)
      .filter((r) => r.reservedAt < deadlineMs)
      .map((r) => r.orderId);
    for (let i = 0; i < expired.length; i += CLOSE_BATCH) {
      const res = await closeOrders(deps, expired.slice(i, i + CLOSE_BATCH), { shopId, deadlineMs });
      closed += res.cancelled;
      closedBeforeWrite += res.cancelledBeforeWrite;
    }
  }
  return { closed, closedBeforeWrite };
}

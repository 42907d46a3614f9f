/**
 * The order jobs (every minute, each under its own lock — see jobs/index.ts):
 * - sweepOutbox: for each shop whose outbox holds entries overdue by OUTBOX_REPUBLISH_AFTER_SECONDS
 *   (drain message lost, writer down, a claimed group whose writer died), publish ONE drain message,
 *   deduplicated per shop and minute. The writer then claims the overdue entries in groups. The
 *   cost is one pipelined ZCOUNT per shop (one subrequest per 500 shops) and at most one QStash
 *   message per shop per minute (batched), however large the backlog and however slow QStash is:
 *   a sweep never multiplies what it re-sends.
 * - closeExpired: close unpaid orders past their payment deadline, and reservations that never
 *   reached MySQL within it — the fallback when a delayed close message is lost — in groups.
 * Both run on metered ports within their share of the cron invocation's subrequests
 * (src/util/subrequests.ts, jobs/index.ts) and stop, leaving the rest for the next run, at it.
 * Reconcile lives in services/seckill/reconcile.ts.
 */
import type { Deps } from "../deps.ts";
import { drainNowMessage, type QueueMessage } from "../queue/orders.ts";
import { keys } from "../redis/keys.ts";
import { metered, SubrequestBudget, SubrequestBudgetExceeded } from "../util/subrequests.ts";
import { toSqlUtc } from "../util/time.ts";
import { closeCost, closeOrders } from "../services/seckill/close.ts";
import { parseReservation } from "../services/seckill/outbox.ts";
import { registeredSeckills, shopsOf } from "../services/seckill/registry.ts";
import { OrderStatus, type Reservation } from "../services/seckill/types.ts";

/** Orders per close-expired group (one MySQL scan page). */
const CLOSE_BATCH = 500;
/** Shops per sweep pipeline (one subrequest: a ZCOUNT each) and drain messages per publish batch. */
const SWEEP_SHOPS_PER_PIPELINE = 500;
const SWEEP_MESSAGES_PER_BATCH = 100;

export interface SweepResult {
  /** Overdue outbox entries seen, over all shops. */
  overdue: number;
  /** Drain messages published (one per shop with overdue entries). */
  drains: number;
  /** True when the subrequest budget ended the pass before every shop was looked at. */
  continued?: boolean;
}

/**
 * Subrequests: the registry read, one pipeline per SWEEP_SHOPS_PER_PIPELINE shops, one publish per
 * SWEEP_MESSAGES_PER_BATCH drains — a handful whatever the number of shops or the backlog.
 */
export async function sweepOutbox(deps: Deps, now: number, budget: SubrequestBudget = SubrequestBudget.forInvocation(deps)): Promise<SweepResult> {
  const d = metered(deps, budget);
  // Never ahead of the clock the writer claims by: a drain for entries still under a claim lease
  // would find nothing, and its deduplication id would hold back the next sweep's for a minute.
  const cutoff = Math.min(now - deps.config.OUTBOX_REPUBLISH_AFTER_SECONDS * 1000, deps.clock.now());
  const shops = shopsOf(await registeredSeckills(d, now));
  let overdue = 0;
  const messages: QueueMessage[] = [];
  let continued = false;
  for (let i = 0; i < shops.length; i += SWEEP_SHOPS_PER_PIPELINE) {
    const chunk = shops.slice(i, i + SWEEP_SHOPS_PER_PIPELINE);
    // This pipeline and the publishes of what it may find must fit.
    if (!budget.fits(1 + Math.ceil((messages.length + chunk.length) / SWEEP_MESSAGES_PER_BATCH))) {
      continued = true;
      break;
    }
    const p = d.redis.pipeline();
    for (const shopId of chunk) p.zcount(keys.seckill.outboxDue(shopId), "-inf", cutoff);
    const counts = (await p.exec()) as number[];
    chunk.forEach((shopId, j) => {
      const n = Number(counts[j] ?? 0);
      if (n === 0) return;
      overdue += n;
      // No delay: these entries are due already. The id names the minute, so overlapping sweeps
      // (two isolates, a retried cron) publish one drain between them.
      messages.push(drainNowMessage(deps, shopId, `sweep-${Math.floor(now / 60_000)}`));
    });
  }
  for (let i = 0; i < messages.length; i += SWEEP_MESSAGES_PER_BATCH) await d.queue.batchJSON(messages.slice(i, i + SWEEP_MESSAGES_PER_BATCH));
  return continued ? { overdue, drains: messages.length, continued } : { overdue, drains: messages.length };
}

export interface CloseExpiredResult {
  closed: number;
  closedBeforeWrite: number;
  /** True when the subrequest budget ended the pass with expired orders left (the next run takes them). */
  continued?: boolean;
}

/** `ids` grouped by voucher, in order, cut into runs of at most `vouchers` vouchers and CLOSE_BATCH ids. */
function voucherChunks(items: readonly { id: string; voucherId: number }[], vouchers: number): { ids: string[]; vouchers: number }[] {
  const byVoucher = new Map<number, string[]>();
  for (const it of items) {
    let list = byVoucher.get(it.voucherId);
    if (!list) byVoucher.set(it.voucherId, (list = []));
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

/** The most vouchers (≤ `max`) one closeOrders call may span with what `budget` has left beside `reserve`, or 0. */
function vouchersThatFit(budget: SubrequestBudget, reserve: number, outbox: boolean, max: number): number {
  let v = 0;
  while (v < max && budget.fits(reserve + closeCost(v + 1, { outbox }))) v++;
  return v;
}

/**
 * Subrequests: per page one SELECT and closeOrders calls of a few vouchers each (close.ts
 * closeCost: per voucher, not per order); per shop one HGETALL and its closes. Past the budget the
 * pass stops; the next run scans from the start again and finds only what is still unpaid.
 */
export async function closeExpired(deps: Deps, now: number, budget: SubrequestBudget = SubrequestBudget.forInvocation(deps)): Promise<CloseExpiredResult> {
  const d = metered(deps, budget);
  const deadlineMs = now - deps.config.ORDER_PAY_TIMEOUT_SECONDS * 1000;
  let closed = 0;
  let closedBeforeWrite = 0;
  try {
    // MySQL rows still unpaid after the deadline (served by idx_status_create), a group per page.
    let after = "0";
    for (;;) {
      // A page read, at least one voucher's close, and the registry read of the outbox pass below.
      if (!budget.fits(1 + closeCost(1, { outbox: false }) + 1)) return { closed, closedBeforeWrite, continued: true };
      const rows = (await d.db.execute("SELECT id, voucher_id FROM tb_voucher_order WHERE status = ? AND create_time < ? AND id > ? ORDER BY id LIMIT ?", [
        OrderStatus.unpaid,
        toSqlUtc(deadlineMs),
        BigInt(after),
        CLOSE_BATCH,
      ])).rows as { id: string; voucher_id: number | string }[];
      if (rows.length === 0) break;
      const items = rows.map((r) => ({ id: String(r.id), voucherId: Number(r.voucher_id) }));
      // Every id is in MySQL: closeOrders reads no outbox for them.
      for (const chunk of voucherChunks(items, Math.max(1, vouchersThatFit(budget, 1, false, CLOSE_BATCH)))) {
        if (!budget.fits(closeCost(chunk.vouchers, { outbox: false }) + 1)) return { closed, closedBeforeWrite, continued: true };
        const res = await closeOrders(d, chunk.ids, { deadlineMs });
        closed += res.cancelled;
      }
      // Keyset paging: an order paid meanwhile stays unpaid-looking to nobody, and one that cannot
      // be closed now is not fetched again in this pass.
      after = String(rows[rows.length - 1]?.id);
      if (rows.length < CLOSE_BATCH) break;
    }
    // Reservations that never reached MySQL within the deadline. The due score moves with every
    // claim, so candidates are chosen by the reservation time inside each entry. The outbox only
    // holds unacknowledged reservations (seconds' worth in a healthy sale).
    for (const shopId of shopsOf(await registeredSeckills(d, now))) {
      if (!budget.fits(1 + closeCost(1))) return { closed, closedBeforeWrite, continued: true };
      const raw = (await d.redis.hgetall<Record<string, unknown>>(keys.seckill.outbox(shopId))) ?? {};
      const expired: Reservation[] = Object.values(raw)
        .filter((v) => v !== null && v !== undefined)
        .map(parseReservation)
        .filter((r) => r.reservedAt < deadlineMs);
      const items = expired.map((r) => ({ id: r.orderId, voucherId: r.voucherId }));
      for (const chunk of voucherChunks(items, Math.max(1, vouchersThatFit(budget, 0, true, CLOSE_BATCH)))) {
        if (!budget.fits(closeCost(chunk.vouchers))) return { closed, closedBeforeWrite, continued: true };
        const res = await closeOrders(d, chunk.ids, { shopId, deadlineMs });
        closed += res.cancelled;
        closedBeforeWrite += res.cancelledBeforeWrite;
      }
    }
  } catch (err) {
    // A call past the budget (a lock-conflict retry beyond the plan): stopped before it was sent.
    if (!(err instanceof SubrequestBudgetExceeded)) throw err;
    return { closed, closedBeforeWrite, continued: true };
  }
  return { closed, closedBeforeWrite };
}

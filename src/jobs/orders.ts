/**
 * The order jobs (every minute, each under its own lock — see jobs/index.ts):
 * - sweepOutbox: re-publish reservations whose writer acknowledgement is overdue (publish lost,
 *   writer crashed before or after its commit); the writer is idempotent, so re-sending is safe.
 * - closeExpired: close unpaid orders past their payment deadline, and reservations that never
 *   reached MySQL within it — the fallback when a delayed close message is lost.
 * Reconcile lives in services/seckill/reconcile.ts.
 */
import type { Deps } from "../deps.ts";
import { publishReservation } from "../queue/orders.ts";
import { keys } from "../redis/keys.ts";
import { toSqlUtc } from "../util/time.ts";
import { closeOrder } from "../services/seckill/orders.ts";
import { registeredSeckills, shopsOf } from "../services/seckill/registry.ts";
import { OrderStatus, type Reservation } from "../services/seckill/types.ts";

const BATCH = 200;


const parseReservation = (raw: unknown): Reservation => (typeof raw === "string" ? JSON.parse(raw) : raw) as Reservation;

export interface SweepResult {
  republished: number;
}

export async function sweepOutbox(deps: Deps, now: number): Promise<SweepResult> {
  const cutoff = now - deps.config.OUTBOX_REPUBLISH_AFTER_SECONDS * 1000;
  const shops = shopsOf(await registeredSeckills(deps, now));
  let republished = 0;
  for (const shopId of shops) {
    for (;;) {
      const ids = (await deps.redis.zrange(keys.seckill.outboxDue(shopId), 0, cutoff, { byScore: true, offset: 0, count: BATCH })) as string[];
      if (ids.length === 0) break;
      const raw = (await deps.redis.hmget<Record<string, unknown>>(keys.seckill.outbox(shopId), ...ids.map(String))) ?? {};
      const entries = Object.values(raw).filter((v) => v !== null && v !== undefined).map(parseReservation);
      // Publish first, then push the due time forward: a crash in between only re-publishes again.
      await Promise.all(entries.map((r) => publishReservation(deps, r, { resend: String(now) })));
      const p = deps.redis.pipeline();
      for (const id of ids) {
        if (raw[String(id)] === null || raw[String(id)] === undefined) p.zrem(keys.seckill.outboxDue(shopId), String(id));
        else p.zadd(keys.seckill.outboxDue(shopId), { xx: true }, { score: now, member: String(id) });
      }
      await p.exec();
      republished += entries.length;
      if (ids.length < BATCH) break;
    }
  }
  return { republished };
}

export interface CloseExpiredResult {
  closed: number;
  closedBeforeWrite: number;
}

export async function closeExpired(deps: Deps, now: number): Promise<CloseExpiredResult> {
  const deadlineMs = now - deps.config.ORDER_PAY_TIMEOUT_SECONDS * 1000;
  let closed = 0;
  let closedBeforeWrite = 0;
  // MySQL rows still unpaid after the deadline (served by idx_status_create).
  for (;;) {
    const rows = (await deps.db.execute("SELECT id FROM tb_voucher_order WHERE status = ? AND create_time < ? ORDER BY create_time LIMIT ?", [
      OrderStatus.unpaid,
      toSqlUtc(deadlineMs),
      BATCH,
    ])).rows as { id: string }[];
    for (const r of rows) if ((await closeOrder(deps, String(r.id))) === "cancelled") closed++;
    if (rows.length < BATCH) break;
  }
  // Reservations that never reached MySQL within the deadline.
  const shops = shopsOf(await registeredSeckills(deps, now));
  for (const shopId of shops) {
    // The due score moves forward with every re-publish, so candidates are chosen by the
    // reservation time inside each entry. The outbox only holds unacknowledged reservations.
    const raw = (await deps.redis.hgetall<Record<string, unknown>>(keys.seckill.outbox(shopId))) ?? {};
    for (const v of Object.values(raw)) {
      if (v === null || v === undefined) continue;
      const r = parseReservation(v);
      if (r.reservedAt >= deadlineMs) continue;
      const outcome = await closeOrder(deps, r.orderId, r);
      if (outcome === "cancelled-before-write") closedBeforeWrite++;
      if (outcome === "cancelled") closed++;
    }
  }
  return { closed, closedBeforeWrite };
}


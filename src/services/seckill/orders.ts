/**
 * The order lifecycle after a reservation: write (QStash → MySQL), close (unpaid → cancelled, stock
 * back), and lookups. Every step is idempotent, because every trigger is at-least-once (QStash
 * redelivers, cron re-runs, callbacks race):
 * - write: INSERT IGNORE on the application-generated primary key; the MySQL stock decrement happens
 *   only when the row was inserted, in the same transaction;
 * - close: a status CAS (unpaid → cancelled) in MySQL decides; only the winner credits MySQL stock;
 *   the Redis release is once-per-order by construction (release-stock.lua);
 * - a reservation that never reached MySQL is closed from its outbox entry: the row is inserted as
 *   cancelled (no MySQL stock change — none was taken) and Redis is released.
 */
import type { Deps } from "../../deps.ts";
import { cachesFor } from "../../cache/modules.ts";
import { keys } from "../../redis/keys.ts";
import { scriptsFor } from "../../redis/scripts.ts";
import { parseSqlUtc, toSqlUtc } from "../../util/time.ts";
import { homeBucket, type SeckillConfig } from "./config.ts";
import { serviceDay } from "./reserve.ts";
import { OrderStatus, type Reservation } from "./types.ts";

export class OversellError extends Error {
  constructor(voucherId: number, orderId: string) {
    super(`MySQL stock of voucher ${voucherId} is exhausted while writing order ${orderId}`);
    this.name = "OversellError";
  }
}

export interface OrderRow {
  id: string;
  userId: number;
  voucherId: number;
  status: number;
  createTime: number;
  payTime: number | null;
}

type Row = Record<string, string | number | null>;

function mapOrder(r: Row): OrderRow {
  return {
    id: String(r.id),
    userId: Number(r.user_id),
    voucherId: Number(r.voucher_id),
    status: Number(r.status),
    createTime: parseSqlUtc(String(r.create_time)),
    payTime: r.pay_time === null || r.pay_time === undefined ? null : parseSqlUtc(String(r.pay_time)),
  };
}

const ORDER_COLUMNS = "id, user_id, voucher_id, status, create_time, pay_time";

export async function getOrderRow(deps: Deps, orderId: string): Promise<OrderRow | null> {
  const row = (await deps.db.execute(`SELECT ${ORDER_COLUMNS} FROM tb_voucher_order WHERE id = ?`, [BigInt(orderId)])).rows[0] as Row | undefined;
  return row ? mapOrder(row) : null;
}

export async function listOrdersOfUser(deps: Deps, userId: number, page: number, pageSize: number): Promise<OrderRow[]> {
  const rows = (
    await deps.db.execute(`SELECT ${ORDER_COLUMNS} FROM tb_voucher_order WHERE user_id = ? ORDER BY id DESC LIMIT ? OFFSET ?`, [userId, pageSize, (page - 1) * pageSize])
  ).rows as Row[];
  return rows.map(mapOrder);
}

async function seckillConfig(deps: Deps, voucherId: number): Promise<SeckillConfig> {
  const cfg = await cachesFor(deps).seckill.get(deps, voucherId);
  if (!cfg) throw new Error(`seckill voucher ${voucherId} has no configuration`);
  return cfg;
}

/** Shops that have seckill vouchers (the outbox is per shop). */
async function activeShops(deps: Deps): Promise<number[]> {
  const members = await deps.redis.smembers<string[]>(keys.seckill.active());
  return [...new Set(members.map((m) => Number(String(m).split(":")[0])))].filter((n) => Number.isInteger(n) && n > 0);
}

/** Finds a reservation still in an outbox (not yet acknowledged by the writer): one pipelined round trip. */
export async function findReservation(deps: Deps, orderId: string): Promise<Reservation | null> {
  const shops = await activeShops(deps);
  if (shops.length === 0) return null;
  const p = deps.redis.pipeline();
  for (const s of shops) p.hget(keys.seckill.outbox(s), orderId);
  const found = ((await p.exec()) as unknown[]).find((v) => v !== null && v !== undefined);
  if (!found) return null;
  return (typeof found === "string" ? JSON.parse(found) : found) as Reservation;
}

/** Drops the outbox entry once MySQL has the order (both keys share the shop's hash tag). */
export async function ackReservation(deps: Deps, r: Pick<Reservation, "shopId" | "orderId">): Promise<void> {
  const tx = deps.redis.multi();
  tx.hdel(keys.seckill.outbox(r.shopId), r.orderId);
  tx.zrem(keys.seckill.outboxDue(r.shopId), r.orderId);
  await tx.exec();
}

/**
 * Inserts the order row and takes the unit from MySQL stock, in one transaction. Returns false
 * (and changes nothing) when the row already exists.
 */
async function insertOrderTx(tx: Pick<Deps["db"], "execute">, r: Reservation, status: number, payTimeMs: number | null): Promise<boolean> {
  const ins = await tx.execute(
    "INSERT IGNORE INTO tb_voucher_order (id, user_id, voucher_id, status, create_time, pay_time) VALUES (?, ?, ?, ?, ?, ?)",
    [BigInt(r.orderId), r.userId, r.voucherId, status, toSqlUtc(r.reservedAt), payTimeMs === null ? null : toSqlUtc(payTimeMs)],
  );
  if (ins.rowsAffected === 0) return false;
  const upd = await tx.execute("UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = ? AND stock > 0", [r.voucherId]);
  // Redis admitted more than MySQL holds: never record it; the transaction rolls back and the
  // message goes to the dead-letter queue for an operator (reconcile reports the drift).
  if (upd.rowsAffected !== 1) throw new OversellError(r.voucherId, r.orderId);
  return true;
}

export type WriteOutcome = "created" | "exists";

/** The order writer (QStash → /internal/orders/write). At-least-once in, exactly-once effect out. */
export async function writeOrder(deps: Deps, r: Reservation): Promise<WriteOutcome> {
  const created = await deps.db.transaction((tx) => insertOrderTx(tx, r, OrderStatus.unpaid, null));
  await ackReservation(deps, r);
  return created ? "created" : "exists";
}

/** Creates the row of a reservation that was paid before the writer got to it (status paid). */
export async function writePaidOrderTx(tx: Pick<Deps["db"], "execute">, r: Reservation, paidAt: number): Promise<boolean> {
  return await insertOrderTx(tx, r, OrderStatus.paid, paidAt);
}

/** Gives the unit back to Redis, once per order (release-stock.lua). */
export async function releaseInRedis(deps: Deps, o: { orderId: string; userId: number; voucherId: number; reservedAt: number }): Promise<boolean> {
  const cfg = await seckillConfig(deps, o.voucherId);
  const day = serviceDay(o.reservedAt, deps.config.SERVICE_TIME_ZONE);
  const released = await scriptsFor(deps.redis).releaseStock.exec(
    [
      keys.seckill.released(cfg.shopId, cfg.voucherId),
      keys.seckill.buyers(cfg.shopId, cfg.voucherId),
      keys.seckill.outbox(cfg.shopId),
      keys.seckill.outboxDue(cfg.shopId),
      keys.seckill.daily(cfg.shopId, o.userId, day),
      keys.seckill.stock(cfg.shopId, cfg.voucherId, homeBucket(o.userId, cfg.buckets)),
    ],
    [o.orderId, String(o.userId)],
  );
  return released === 1;
}

export type CloseOutcome = "cancelled" | "cancelled-before-write" | "already-cancelled" | "not-unpaid" | "unknown";

/**
 * Closes an unpaid order (QStash delayed message, or the close-expired job). `reservation` is
 * needed only when the order may not have reached MySQL yet (the close message carries it).
 */
export async function closeOrder(deps: Deps, orderId: string, reservation?: Reservation): Promise<CloseOutcome> {
  for (let attempt = 0; attempt < 2; attempt++) {
    const res = await deps.db.transaction(async (tx) => {
      const row = (await tx.execute(`SELECT ${ORDER_COLUMNS} FROM tb_voucher_order WHERE id = ? FOR UPDATE`, [BigInt(orderId)])).rows[0] as Row | undefined;
      if (!row) {
        const r = reservation ?? (await findReservation(deps, orderId));
        if (!r) return { kind: "unknown" as const };
        // Never written: record it as cancelled so a late writer message is a no-op. No MySQL
        // stock was taken for it, so none is given back.
        const ins = await tx.execute("INSERT IGNORE INTO tb_voucher_order (id, user_id, voucher_id, status, create_time) VALUES (?, ?, ?, ?, ?)", [
          BigInt(orderId),
          r.userId,
          r.voucherId,
          OrderStatus.cancelled,
          toSqlUtc(r.reservedAt),
        ]);
        return ins.rowsAffected === 1 ? { kind: "cancelled-before-write" as const, order: { orderId, userId: r.userId, voucherId: r.voucherId, reservedAt: r.reservedAt } } : { kind: "retry" as const };
      }
      const o = mapOrder(row);
      const ref = { orderId, userId: o.userId, voucherId: o.voucherId, reservedAt: o.createTime };
      if (o.status === OrderStatus.cancelled) return { kind: "already-cancelled" as const, order: ref };
      if (o.status !== OrderStatus.unpaid) return { kind: "not-unpaid" as const };
      const upd = await tx.execute("UPDATE tb_voucher_order SET status = ? WHERE id = ? AND status = ?", [OrderStatus.cancelled, BigInt(orderId), OrderStatus.unpaid]);
      if (upd.rowsAffected !== 1) return { kind: "not-unpaid" as const };
      await tx.execute("UPDATE tb_seckill_voucher SET stock = stock + 1 WHERE voucher_id = ?", [o.voucherId]);
      return { kind: "cancelled" as const, order: ref };
    });
    if (res.kind === "retry") continue; // the writer inserted the row meanwhile: CAS on it
    if (res.kind === "cancelled" || res.kind === "cancelled-before-write" || res.kind === "already-cancelled") {
      // After the commit; a crash here is repaired by redelivery or the reconcile job (idempotent).
      await releaseInRedis(deps, res.order);
    }
    return res.kind;
  }
  return "not-unpaid";
}

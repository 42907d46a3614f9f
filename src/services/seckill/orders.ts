/**
 * Order lookups, and the single-order entry points of the pipeline stages (writer.ts, close.ts,
 * outbox.ts) for callers that hold one order: payments, operators, tests.
 *
 * Every step is idempotent, because every trigger is at-least-once (QStash redelivers, cron
 * re-runs, callbacks race): the writer inserts on the application-generated primary key and takes
 * MySQL stock only for rows it inserted; close is a status CAS and only its winner gives stock
 * back; the Redis release is once per order (released set).
 */
import type { Deps } from "../../deps.ts";
import { parseSqlUtc } from "../../util/time.ts";
import { withLockRetry } from "./mysql-retry.ts";
import { ackGroup, outboxRedis } from "./outbox.ts";
import { OrderStatus, type Reservation } from "./types.ts";
import { writeVoucherRowsTx } from "./writer.ts";

export { ackReservation, findReservation } from "./outbox.ts";
export { closeOrder, closeOrders, releaseInRedis, releaseManyInRedis, type CloseOutcome } from "./close.ts";
export { OversellError } from "./writer.ts";

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
  const row = (await deps.db.execute(`SELECT ${ORDER_COLUMNS} FROM tb_voucher_order WHERE id = ?`, [BigInt(orderId)]))
    .rows[0] as Row | undefined;
  return row ? mapOrder(row) : null;
}

export async function listOrdersOfUser(
  deps: Deps,
  userId: number,
  page: number,
  pageSize: number,
): Promise<OrderRow[]> {
  const rows = (
    await deps.db.execute(
      `SELECT ${ORDER_COLUMNS} FROM tb_voucher_order WHERE user_id = ? ORDER BY id DESC LIMIT ? OFFSET ?`,
      [userId, pageSize, (page - 1) * pageSize],
    )
  ).rows as Row[];
  return rows.map(mapOrder);
}

export type WriteOutcome = "created" | "exists";

/**
 * Writes one reservation the caller read from the outbox (a group of one: the same transaction
 * shape as the drain) and acknowledges it in the outbox it is in (its shard's, when sharded).
 */
export async function writeOrder(deps: Deps, r: Reservation): Promise<WriteOutcome> {
  const created = await withLockRetry(deps, deps.isolate.orderGroups.lockConflicts, "write order", () =>
    deps.db.transaction((tx) => writeVoucherRowsTx(tx, r.voucherId, [r], OrderStatus.unpaid, null)),
  );
  await ackGroup({ redis: outboxRedis(deps, r.shard) }, r.shopId, [r.orderId]);
  return created === 1 ? "created" : "exists";
}

/** Creates the row of a reservation that was paid before the writer got to it (status paid). */
export async function writePaidOrderTx(
  tx: Pick<Deps["db"], "execute">,
  r: Reservation,
  paidAt: number,
): Promise<boolean> {
  return (await writeVoucherRowsTx(tx, r.voucherId, [r], OrderStatus.paid, paidAt)) === 1;
}

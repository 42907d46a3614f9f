/**
 * Paying for an order. The owner starts a payment (a tb_payment row, then the provider); the
 * provider's signed webhook settles it. Pay and close race on one condition — the order's status
 * CAS `unpaid → paid` vs `unpaid → cancelled` — so exactly one wins:
 * - payment wins: the order is paid; a later close finds it not unpaid and does nothing;
 * - close wins: the money arrived for a cancelled order → the order becomes `refunding`, a refund
 *   row is recorded (one per payment) and requested from the provider, `refunded` on its webhook;
 * - the order row does not exist yet (writer behind): it is created from the reservation as paid.
 * Webhook redelivery is harmless: each payment and refund row moves out of `pending` only once.
 */
import type { Deps } from "../../deps.ts";
import { idsFor } from "../../redis/ids.ts";
import { toSqlUtc } from "../../util/time.ts";
import type { WebhookEvent } from "../../payments/provider.ts";
import { ackReservation, findReservation, getOrderRow, writePaidOrderTx } from "./orders.ts";
import { OrderStatus, statusName, type Reservation } from "./types.ts";
import { cachesFor } from "../../cache/modules.ts";

export const PaymentStatus = { pending: 1, succeeded: 2, failed: 3 } as const;
export const RefundStatus = { requested: 1, succeeded: 2, failed: 3 } as const;

export type StartPaymentResult =
  | { ok: true; paymentId: string }
  | { ok: false; reason: "NOT_FOUND"; message: string }
  | { ok: false; reason: "BAD_STATE"; message: string };

/** Owner-only: another user's order is indistinguishable from a missing one (no BOLA oracle). */
export async function startPayment(deps: Deps, userId: number, orderId: string): Promise<StartPaymentResult> {
  const row = await getOrderRow(deps, orderId);
  let amount: number;
  if (row) {
    if (row.userId !== userId) return { ok: false, reason: "NOT_FOUND", message: "order not found" };
    if (row.status !== OrderStatus.unpaid) return { ok: false, reason: "BAD_STATE", message: `order is ${statusName(row.status)}` };
    const cfg = await cachesFor(deps).seckill.get(deps, row.voucherId);
    amount = cfg?.payValue ?? 0;
  } else {
    const r = await findReservation(deps, orderId);
    if (!r || r.userId !== userId) return { ok: false, reason: "NOT_FOUND", message: "order not found" };
    amount = r.amount;
  }
  const paymentId = (await idsFor(deps).next()).toString();
  await deps.db.execute("INSERT INTO tb_payment (id, order_id, user_id, amount, status) VALUES (?, ?, ?, ?, ?)", [
    BigInt(paymentId),
    BigInt(orderId),
    userId,
    amount,
    PaymentStatus.pending,
  ]);
  try {
    const { providerRef } = await deps.payments.charge({ paymentId, orderId, amount }, deps.waitUntil);
    await deps.db.execute("UPDATE tb_payment SET provider_ref = ? WHERE id = ?", [providerRef, BigInt(paymentId)]);
  } catch (err) {
    await deps.db.execute("UPDATE tb_payment SET status = ? WHERE id = ? AND status = ?", [PaymentStatus.failed, BigInt(paymentId), PaymentStatus.pending]);
    deps.log.warn("payment provider refused the charge", { orderId, err });
    return { ok: false, reason: "BAD_STATE", message: "the payment provider refused the charge" };
  }
  return { ok: true, paymentId };
}

export type SettleOutcome = "paid" | "paid-from-reservation" | "refund-requested" | "declined" | "duplicate" | "unknown-payment" | "refunded";

interface PaymentRow {
  id: string;
  orderId: string;
  amount: number;
  status: number;
}

/** Applies a provider webhook. Idempotent: a second delivery of the same event is "duplicate". */
export async function settleWebhook(deps: Deps, event: WebhookEvent): Promise<SettleOutcome> {
  if ("refundId" in event) return await settleRefund(deps, event.refundId, event.type === "refund.succeeded");
  return await settlePayment(deps, event);
}

async function settlePayment(deps: Deps, event: Extract<WebhookEvent, { paymentId: string }>): Promise<SettleOutcome> {
  const pay = (await deps.db.execute("SELECT id, order_id, amount, status FROM tb_payment WHERE id = ?", [BigInt(event.paymentId)])).rows[0] as
    | Record<string, string | number>
    | undefined;
  if (!pay) return "unknown-payment";
  const payment: PaymentRow = { id: String(pay.id), orderId: String(pay.order_id), amount: Number(pay.amount), status: Number(pay.status) };
  if (event.type === "payment.failed") {
    const upd = await deps.db.execute("UPDATE tb_payment SET status = ? WHERE id = ? AND status = ?", [PaymentStatus.failed, BigInt(payment.id), PaymentStatus.pending]);
    return upd.rowsAffected === 1 ? "declined" : "duplicate";
  }
  // The reservation is looked up before the transaction (a Redis call has no place inside it);
  // it is only used when the order row is still missing.
  const reservation = (await getOrderRow(deps, payment.orderId)) ? null : await findReservation(deps, payment.orderId);
  const now = deps.clock.now();
  const outcome = await deps.db.transaction(async (tx) => {
    const claimed = await tx.execute("UPDATE tb_payment SET status = ? WHERE id = ? AND status = ?", [PaymentStatus.succeeded, BigInt(payment.id), PaymentStatus.pending]);
    if (claimed.rowsAffected !== 1) return { kind: "duplicate" as const };
    const paid = await tx.execute("UPDATE tb_voucher_order SET status = ?, pay_time = ? WHERE id = ? AND status = ?", [
      OrderStatus.paid,
      toSqlUtc(now),
      BigInt(payment.orderId),
      OrderStatus.unpaid,
    ]);
    if (paid.rowsAffected === 1) return { kind: "paid" as const };
    const row = (await tx.execute("SELECT status FROM tb_voucher_order WHERE id = ? FOR UPDATE", [BigInt(payment.orderId)])).rows[0] as { status: number } | undefined;
    if (!row && reservation) {
      if (await writePaidOrderTx(tx, reservation, now)) return { kind: "paid-from-reservation" as const, reservation };
    }
    // Close won (or the order was already paid by another payment, or it vanished): refund.
    const refundId = (await idsFor(deps).next()).toString();
    const reason = row && Number(row.status) === OrderStatus.paid ? "duplicate-payment" : "paid-after-close";
    await tx.execute("INSERT IGNORE INTO tb_refund (id, payment_id, order_id, amount, reason, status) VALUES (?, ?, ?, ?, ?, ?)", [
      BigInt(refundId),
      BigInt(payment.id),
      BigInt(payment.orderId),
      payment.amount,
      reason,
      RefundStatus.requested,
    ]);
    if (row && Number(row.status) === OrderStatus.cancelled) {
      await tx.execute("UPDATE tb_voucher_order SET status = ? WHERE id = ? AND status = ?", [OrderStatus.refunding, BigInt(payment.orderId), OrderStatus.cancelled]);
    }
    return { kind: "refund" as const, refundId };
  });
  if (outcome.kind === "duplicate") return "duplicate";
  if (outcome.kind === "paid") return "paid";
  if (outcome.kind === "paid-from-reservation") {
    await ackReservation(deps, outcome.reservation as Reservation);
    return "paid-from-reservation";
  }
  // After the commit: ask the provider for the money back. If this call fails the refund row stays
  // `requested` and is visible to operators; asking again is safe (one refund row per payment).
  try {
    await deps.payments.refund({ refundId: outcome.refundId, paymentId: payment.id, orderId: payment.orderId, amount: payment.amount }, deps.waitUntil);
  } catch (err) {
    deps.log.error("refund request failed; refund stays requested", { refundId: outcome.refundId, err });
  }
  return "refund-requested";
}

async function settleRefund(deps: Deps, refundId: string, succeeded: boolean): Promise<SettleOutcome> {
  return await deps.db.transaction(async (tx) => {
    const ref = (await tx.execute("SELECT order_id FROM tb_refund WHERE id = ? FOR UPDATE", [BigInt(refundId)])).rows[0] as { order_id: string } | undefined;
    if (!ref) return "unknown-payment";
    const upd = await tx.execute("UPDATE tb_refund SET status = ? WHERE id = ? AND status = ?", [
      succeeded ? RefundStatus.succeeded : RefundStatus.failed,
      BigInt(refundId),
      RefundStatus.requested,
    ]);
    if (upd.rowsAffected !== 1) return "duplicate";
    if (succeeded) {
      await tx.execute("UPDATE tb_voucher_order SET status = ?, refund_time = ? WHERE id = ? AND status = ?", [
        OrderStatus.refunded,
        toSqlUtc(deps.clock.now()),
        BigInt(ref.order_id),
        OrderStatus.refunding,
      ]);
    }
    return "refunded";
  });
}

/**
 * Paying for an order. The owner starts a payment (a tb_payment row, then the provider); the
 * provider's signed webhook settles it. Pay and close race on the order's status CAS
 * (`unpaid → paid` vs `unpaid → cancelled`), so exactly one wins; money that arrives for a
 * cancelled order is refunded, and an order not yet in MySQL is created from its reservation as paid.
 * Invariants: at most one pending payment per order across isolates (a unique key on
 * `tb_payment.pending_order_id`); `payment.succeeded` is applied exactly once, even after a failure;
 * a refund is retried until the provider confirms it (the refund-retry job, bounded backoff); no
 * MySQL transaction is open across a Redis or provider call.
 * The cases in full: docs/modules.md "services/seckill/payments.ts".
 */
import type { Deps } from "../../deps.ts";
import { withLockRetry } from "./mysql-retry.ts";
import { metered, SubrequestBudget, SubrequestBudgetExceeded } from "../../ports/subrequests.ts";
import { parseSqlUtc, toSqlUtc } from "../../util/time.ts";
import type { WebhookEvent } from "../../payments/provider.ts";
import { ackReservation, findReservation, getOrderRow, writePaidOrderTx } from "./orders.ts";
import { OrderStatus, statusName, type Reservation } from "./types.ts";

export const PaymentStatus = { pending: 1, succeeded: 2, failed: 3 } as const;
/** tb_refund.status: requested = asked (or about to be), awaiting the provider; failed = will be retried. */
export const RefundStatus = { requested: 1, succeeded: 2, failed: 3 } as const;
export type RefundState = keyof typeof RefundStatus;

export type StartPaymentResult =
  | { ok: true; paymentId: string }
  | { ok: false; reason: "NOT_FOUND"; message: string }
  | { ok: false; reason: "BAD_STATE"; message: string };

/**
 * Owner-only: another user's order is indistinguishable from a missing one (no BOLA oracle).
 * Idempotent while a payment is pending: every caller gets that payment's id, only the caller
 * whose INSERT created it asks the provider for the charge.
 */
export async function startPayment(deps: Deps, userId: number, orderId: string): Promise<StartPaymentResult> {
  const row = await getOrderRow(deps, orderId);
  let amount: number;
  if (row) {
    if (row.userId !== userId) return { ok: false, reason: "NOT_FOUND", message: "order not found" };
    if (row.status !== OrderStatus.unpaid)
      return { ok: false, reason: "BAD_STATE", message: `order is ${statusName(row.status)}` };
    const cfg = await deps.isolate.caches.seckill.get(deps, row.voucherId);
    amount = cfg?.payValue ?? 0;
  } else {
    const r = await findReservation(deps, orderId);
    if (!r || r.userId !== userId) return { ok: false, reason: "NOT_FOUND", message: "order not found" };
    amount = r.amount;
  }
  // Two rounds: a pending payment that fails between our INSERT and our SELECT frees the slot,
  // and the second INSERT then takes it. Ids are unique, so IGNORE only ever skips on the slot.
  for (let round = 0; round < 2; round++) {
    const paymentId = (await deps.isolate.ids.next(deps)).toString();
    const ins = await deps.db.execute(
      "INSERT IGNORE INTO tb_payment (id, order_id, user_id, amount, status) VALUES (?, ?, ?, ?, ?)",
      [BigInt(paymentId), BigInt(orderId), userId, amount, PaymentStatus.pending],
    );
    if (ins.rowsAffected === 1) return await charge(deps, { paymentId, orderId, amount });
    const open = (await deps.db.execute("SELECT id FROM tb_payment WHERE pending_order_id = ?", [BigInt(orderId)]))
      .rows[0] as { id: string } | undefined;
    if (open) return { ok: true, paymentId: String(open.id) };
  }
  return { ok: false, reason: "BAD_STATE", message: "a payment for this order is changing state; try again" };
}

/** The slot owner's charge. A refused charge fails the payment, which frees the slot for a retry. */
async function charge(
  deps: Deps,
  req: { paymentId: string; orderId: string; amount: number },
): Promise<StartPaymentResult> {
  try {
    const { providerRef } = await deps.payments.charge(req, deps.waitUntil);
    await deps.db.execute("UPDATE tb_payment SET provider_ref = ? WHERE id = ?", [providerRef, BigInt(req.paymentId)]);
  } catch (err) {
    // If the provider did take the charge and only the reply was lost, its payment.succeeded
    // webhook still lands (succeeded is accepted after failed), so marking failed loses nothing.
    await deps.db.execute("UPDATE tb_payment SET status = ? WHERE id = ? AND status = ?", [
      PaymentStatus.failed,
      BigInt(req.paymentId),
      PaymentStatus.pending,
    ]);
    deps.log.warn("payment provider refused the charge", { orderId: req.orderId, err });
    return { ok: false, reason: "BAD_STATE", message: "the payment provider refused the charge" };
  }
  return { ok: true, paymentId: req.paymentId };
}

export type SettleOutcome =
  | "paid"
  | "paid-from-reservation"
  | "refund-requested"
  | "declined"
  | "duplicate"
  | "unknown-payment"
  | "refunded"
  | "refund-failed";

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
  const pay = (
    await deps.db.execute("SELECT id, order_id, amount, status FROM tb_payment WHERE id = ?", [BigInt(event.paymentId)])
  ).rows[0] as Record<string, string | number> | undefined;
  if (!pay) return "unknown-payment";
  const payment: PaymentRow = {
    id: String(pay.id),
    orderId: String(pay.order_id),
    amount: Number(pay.amount),
    status: Number(pay.status),
  };
  if (event.type === "payment.failed") {
    // Only a pending payment can fail: a failure after a success (out of order, or forged) is noise.
    const upd = await deps.db.execute("UPDATE tb_payment SET status = ? WHERE id = ? AND status = ?", [
      PaymentStatus.failed,
      BigInt(payment.id),
      PaymentStatus.pending,
    ]);
    return upd.rowsAffected === 1 ? "declined" : "duplicate";
  }
  if (payment.status === PaymentStatus.succeeded) return "duplicate";
  // The reservation is looked up before the transaction (a Redis call has no place inside it);
  // it is only used when the order row is still missing.
  const reservation = (await getOrderRow(deps, payment.orderId)) ? null : await findReservation(deps, payment.orderId);
  const now = deps.clock.now();
  // Drawn before the transaction: the id generator may have to renew its lease in Redis, and no
  // Redis call belongs inside a MySQL transaction. Unused when no refund is owed.
  const refundId = (await deps.isolate.ids.next(deps)).toString();
  // Pay races close on the order row and the writer on its insert: a lock conflict redoes the
  // whole transaction (nothing in it has effects outside MySQL).
  const outcome = await withLockRetry(deps, deps.isolate.orderGroups.lockConflicts, "settle payment", () =>
    deps.db.transaction(async (tx) => {
      // Pending or failed → succeeded, once. Accepting `failed` is what keeps a success that follows
      // a failure (forged, out of order, or our own "refused" after a lost reply) from being dropped.
      const claimed = await tx.execute("UPDATE tb_payment SET status = ? WHERE id = ? AND status IN (?, ?)", [
        PaymentStatus.succeeded,
        BigInt(payment.id),
        PaymentStatus.pending,
        PaymentStatus.failed,
      ]);
      if (claimed.rowsAffected !== 1) return { kind: "duplicate" as const };
      const paid = await tx.execute(
        "UPDATE tb_voucher_order SET status = ?, pay_time = ? WHERE id = ? AND status = ?",
        [OrderStatus.paid, toSqlUtc(now), BigInt(payment.orderId), OrderStatus.unpaid],
      );
      if (paid.rowsAffected === 1) return { kind: "paid" as const };
      const row = (
        await tx.execute("SELECT status FROM tb_voucher_order WHERE id = ? FOR UPDATE", [BigInt(payment.orderId)])
      ).rows[0] as { status: number } | undefined;
      if (!row && reservation) {
        if (await writePaidOrderTx(tx, reservation, now))
          return { kind: "paid-from-reservation" as const, reservation };
      }
      // Close won (or the order was already paid by another payment, or it vanished): refund.
      // next_attempt_at = now: should this isolate die before asking, the refund-retry job asks.
      const reason = row && Number(row.status) === OrderStatus.paid ? "duplicate-payment" : "paid-after-close";
      const ins = await tx.execute(
        "INSERT IGNORE INTO tb_refund (id, payment_id, order_id, amount, reason, status, attempts, next_attempt_at) VALUES (?, ?, ?, ?, ?, ?, 0, ?)",
        [
          BigInt(refundId),
          BigInt(payment.id),
          BigInt(payment.orderId),
          payment.amount,
          reason,
          RefundStatus.requested,
          toSqlUtc(now),
        ],
      );
      if (row && Number(row.status) === OrderStatus.cancelled) {
        await tx.execute("UPDATE tb_voucher_order SET status = ? WHERE id = ? AND status = ?", [
          OrderStatus.refunding,
          BigInt(payment.orderId),
          OrderStatus.cancelled,
        ]);
      }
      return { kind: "refund" as const, refundId: ins.rowsAffected === 1 ? refundId : null };
    }),
  );
  if (outcome.kind === "duplicate") return "duplicate";
  if (outcome.kind === "paid") return "paid";
  if (outcome.kind === "paid-from-reservation") {
    // Out of the outbox it was in: its home shard's for a sharded voucher (Reservation.shard).
    await ackReservation(deps, outcome.reservation as Reservation);
    return "paid-from-reservation";
  }
  // After the commit: ask the provider for the money back. A failure here is recorded on the
  // refund row and retried by the job; the webhook itself has done its part.
  if (outcome.refundId) {
    try {
      await attemptRefund(
        deps,
        { id: outcome.refundId, paymentId: payment.id, orderId: payment.orderId, amount: payment.amount, attempts: 0 },
        now,
      );
    } catch (err) {
      deps.log.error("could not record the refund attempt; the refund-retry job will ask again", {
        refundId: outcome.refundId,
        err,
      });
    }
  }
  return "refund-requested";
}

async function settleRefund(deps: Deps, refundId: string, succeeded: boolean): Promise<SettleOutcome> {
  const now = deps.clock.now();
  return await deps.db.transaction(async (tx) => {
    const ref = (
      await tx.execute("SELECT order_id, attempts FROM tb_refund WHERE id = ? FOR UPDATE", [BigInt(refundId)])
    ).rows[0] as { order_id: string; attempts: number } | undefined;
    if (!ref) return "unknown-payment";
    if (!succeeded) {
      // Only an attempt in flight can fail; the job asks again after the backoff. The order stays
      // `refunding` meanwhile.
      const upd = await tx.execute(
        "UPDATE tb_refund SET status = ?, last_error = ?, next_attempt_at = ? WHERE id = ? AND status = ?",
        [
          RefundStatus.failed,
          "provider reported refund.failed",
          toSqlUtc(now + refundRetryDelayMs(deps, Number(ref.attempts))),
          BigInt(refundId),
          RefundStatus.requested,
        ],
      );
      return upd.rowsAffected === 1 ? "refund-failed" : "duplicate";
    }
    // Success is final, whatever came before it (a failure report of an earlier attempt included).
    const upd = await tx.execute(
      "UPDATE tb_refund SET status = ?, next_attempt_at = NULL WHERE id = ? AND status IN (?, ?)",
      [RefundStatus.succeeded, BigInt(refundId), RefundStatus.requested, RefundStatus.failed],
    );
    if (upd.rowsAffected !== 1) return "duplicate";
    await tx.execute("UPDATE tb_voucher_order SET status = ?, refund_time = ? WHERE id = ? AND status = ?", [
      OrderStatus.refunded,
      toSqlUtc(now),
      BigInt(ref.order_id),
      OrderStatus.refunding,
    ]);
    return "refunded";
  });
}

// ---------------------------------------------------------------------------------------------
// Refund delivery: attempts, backoff, the job's work list and the operator's view.

/** A refund as the retry logic needs it; `attempts` is the count already made (the CAS value). */
export interface RefundTask {
  id: string;
  paymentId: string;
  orderId: string;
  amount: number;
  attempts: number;
}

/**
 * Delay before the attempt after `attempts` failed ones, ms: min(max, base · 2^(attempts−1)),
 * jittered down to half so refunds that failed together (a provider outage) do not retry in step.
 */
export function refundRetryDelayMs(deps: Pick<Deps, "config">, attempts: number): number {
  const base = deps.config.PAYMENT_REFUND_RETRY_BASE_SECONDS * 1000;
  const max = Math.max(base, deps.config.PAYMENT_REFUND_RETRY_MAX_SECONDS * 1000);
  const capped = Math.min(max, base * 2 ** Math.min(30, Math.max(0, attempts - 1)));
  return Math.round(capped * (0.5 + Math.random() * 0.5));
}

export type AttemptOutcome = "requested" | "failed" | "skipped";

/**
 * One provider request for a refund. The attempt is claimed first (CAS on `attempts`, status
 * requested or failed), so two askers (the webhook path and the job, or two job runs) never both
 * ask for the same attempt; "skipped" means someone else claimed it or the refund is settled.
 * While the request is in flight the row is `requested` with next_attempt_at one max-backoff away:
 * if no webhook ever reports on it, the job asks again then (the provider dedupes on refundId).
 */
export async function attemptRefund(deps: Deps, r: RefundTask, now: number): Promise<AttemptOutcome> {
  const attempt = r.attempts + 1;
  const claimed = await deps.db.execute(
    "UPDATE tb_refund SET status = ?, attempts = ?, next_attempt_at = ? WHERE id = ? AND attempts = ? AND status IN (?, ?)",
    [
      RefundStatus.requested,
      attempt,
      toSqlUtc(
        now +
          Math.max(deps.config.PAYMENT_REFUND_RETRY_BASE_SECONDS, deps.config.PAYMENT_REFUND_RETRY_MAX_SECONDS) * 1000,
      ),
      BigInt(r.id),
      r.attempts,
      RefundStatus.requested,
      RefundStatus.failed,
    ],
  );
  if (claimed.rowsAffected !== 1) return "skipped";
  let providerRef: string;
  try {
    ({ providerRef } = await deps.payments.refund(
      { refundId: r.id, paymentId: r.paymentId, orderId: r.orderId, amount: r.amount },
      deps.waitUntil,
    ));
  } catch (err) {
    const message = (err instanceof Error ? err.message : String(err)).slice(0, 255);
    // Guarded by this attempt: a webhook that already settled it, or a newer attempt, wins.
    await deps.db.execute(
      "UPDATE tb_refund SET status = ?, last_error = ?, next_attempt_at = ? WHERE id = ? AND attempts = ? AND status = ?",
      [
        RefundStatus.failed,
        message,
        toSqlUtc(now + refundRetryDelayMs(deps, attempt)),
        BigInt(r.id),
        attempt,
        RefundStatus.requested,
      ],
    );
    deps.log.warn("refund request failed; the refund-retry job will ask again", { refundId: r.id, attempt, err });
    return "failed";
  }
  await deps.db.execute("UPDATE tb_refund SET provider_ref = ? WHERE id = ?", [providerRef, BigInt(r.id)]);
  return "requested";
}

/** Refunds whose next attempt is due at `now` (idx_due), oldest due first. */
export async function dueRefunds(deps: Deps, now: number, limit: number): Promise<RefundTask[]> {
  const rows = (
    await deps.db.execute(
      "SELECT id, payment_id, order_id, amount, attempts FROM tb_refund WHERE status IN (?, ?) AND next_attempt_at <= ? ORDER BY next_attempt_at LIMIT ?",
      [RefundStatus.requested, RefundStatus.failed, toSqlUtc(now), limit],
    )
  ).rows as Record<string, string | number>[];
  return rows.map((x) => ({
    id: String(x.id),
    paymentId: String(x.payment_id),
    orderId: String(x.order_id),
    amount: Number(x.amount),
    attempts: Number(x.attempts),
  }));
}

/** Refunds per retry run at most; the rest stay due and are taken by the next run. */
const REFUND_RETRY_BATCH = 200;
/**
 * Provider requests in flight at once in a retry run. Workers opens at most six connections per
 * invocation and queues the rest (while our per-call timeout runs); the cron invocation also runs
 * the sweep, close-expired and reconcile, one connection each: 3 + 3 = 6.
 */
export const REFUND_PARALLEL = 3;
/**
 * Subrequests of one attempt at most: the claiming UPDATE, the provider call (2 with the local
 * provider, which calls our webhook back from the same invocation) and the closing UPDATE.
 */
function refundCost(deps: Deps): number {
  return deps.config.PAYMENT_PROVIDER === "local" ? 4 : 3;
}

export interface RefundRetryResult {
  due: number;
  requested: number;
  failed: number;
  skipped: number;
}

/**
 * The refund-retry job (every minute, under its lock — jobs/index.ts): asks the provider again
 * for every refund whose next attempt is due — after a rejected request, a `refund.failed`
 * webhook, or a request never reported on — within its share of the cron invocation's
 * subrequests. The attempt, its CAS and the backoff are attemptRefund's; this walks the due list.
 */
export async function retryRefunds(
  deps: Deps,
  now: number,
  budget: SubrequestBudget = SubrequestBudget.forInvocation(deps),
): Promise<RefundRetryResult> {
  const d = metered(deps, budget);
  // As many as this run's subrequests cover after the due read; the others wait for the next run.
  const take = Math.min(REFUND_RETRY_BATCH, Math.floor((budget.left - 1) / refundCost(deps)));
  if (take <= 0) return { due: 0, requested: 0, failed: 0, skipped: 0 };
  const due = await dueRefunds(d, now, take);
  const result: RefundRetryResult = { due: due.length, requested: 0, failed: 0, skipped: 0 };
  for (let i = 0; i < due.length; i += REFUND_PARALLEL) {
    const outcomes = await Promise.all(
      due.slice(i, i + REFUND_PARALLEL).map(async (r) => {
        try {
          return await attemptRefund(d, r, now);
        } catch (err) {
          // Refused before it was sent (never expected: the batch was sized to fit): due again next run.
          if (err instanceof SubrequestBudgetExceeded) return "skipped" as const;
          // A database error while recording: the row stays due (or in flight) and is taken again.
          deps.log.error("refund retry failed", { refundId: r.id, err });
          return "failed" as const;
        }
      }),
    );
    for (const o of outcomes) result[o]++;
  }
  return result;
}

export interface RefundView {
  id: string;
  paymentId: string;
  orderId: string;
  /** Cents. */
  amount: number;
  reason: string;
  state: RefundState;
  attempts: number;
  lastError: string | null;
  /** Epoch ms; null once succeeded. */
  nextAttemptAt: number | null;
  providerRef: string | null;
  createTime: number;
  updateTime: number;
}

const refundStateOf = (code: number): RefundState =>
  (Object.entries(RefundStatus) as [RefundState, number][]).find(([, v]) => v === code)?.[0] ?? "requested";

/** The operator's view (GET /admin/refunds): newest first; `open` = requested or failed. */
export async function listRefunds(
  deps: Deps,
  filter: { state?: RefundState | "open"; orderId?: string; limit: number },
): Promise<RefundView[]> {
  const where: string[] = [];
  const args: unknown[] = [];
  if (filter.state === "open") {
    where.push("status IN (?, ?)");
    args.push(RefundStatus.requested, RefundStatus.failed);
  } else if (filter.state) {
    where.push("status = ?");
    args.push(RefundStatus[filter.state]);
  }
  if (filter.orderId) {
    where.push("order_id = ?");
    args.push(BigInt(filter.orderId));
  }
  const rows = (
    await deps.db.execute(
      `SELECT id, payment_id, order_id, amount, reason, status, attempts, last_error, next_attempt_at, provider_ref, create_time, update_time
         FROM tb_refund ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY id DESC LIMIT ?`,
      [...args, filter.limit],
    )
  ).rows as Record<string, string | number | null>[];
  return rows.map((x) => ({
    id: String(x.id),
    paymentId: String(x.payment_id),
    orderId: String(x.order_id),
    amount: Number(x.amount),
    reason: String(x.reason),
    state: refundStateOf(Number(x.status)),
    attempts: Number(x.attempts),
    lastError: x.last_error === null ? null : String(x.last_error),
    nextAttemptAt: x.next_attempt_at === null ? null : parseSqlUtc(String(x.next_attempt_at)),
    providerRef: x.provider_ref === null ? null : String(x.provider_ref),
    createTime: parseSqlUtc(String(x.create_time)),
    updateTime: parseSqlUtc(String(x.update_time)),
  }));
}

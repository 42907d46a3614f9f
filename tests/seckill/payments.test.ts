/**
 * Payments (issue 8): webhooks out of order, concurrent pay calls, refund retries, and the webhook
 * secret's configuration. Orders are seeded as MySQL rows with random ids (the pay path only reads
 * the row), so these tests do not depend on the reservation pipeline; the provider is the real
 * local one (signed webhooks over HTTP), disturbed through wrappers where a test needs it.
 */
import { describe, expect, test } from "bun:test";
import { parseEnv } from "../../src/env.ts";
import { cronJobs, runCron } from "../../src/jobs/index.ts";
import { retryRefunds } from "../../src/services/seckill/payments.ts";
import type { PaymentProvider, RefundRequest } from "../../src/payments/provider.ts";
import { signWebhook } from "../../src/payments/signature.ts";
import type { RefundView } from "../../src/services/seckill/payments.ts";
import { call, type Envelope } from "../support/http.ts";
import { operator } from "../support/fixtures.ts";
import { Faults } from "../support/faults.ts";
import { Hold } from "../support/hold.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { eventually, getStack, serveTestApp, type ServedApp } from "../support/stack.ts";
import { PAYMENT_WEBHOOK_PATH } from "../../src/queue/messages.ts";

const RETRY_MAX_MS = 600_000;
const ENV = {
  LOCAL_PAYMENT_DELAY_MS: "0",
  PAYMENT_REFUND_RETRY_BASE_SECONDS: "60",
  PAYMENT_REFUND_RETRY_MAX_SECONDS: String(RETRY_MAX_MS / 1000),
};
const Status = { unpaid: 1, paid: 2, cancelled: 4, refunding: 5, refunded: 6 } as const;

/** A random positive 63-bit id (18 digits), as order and payment ids are. */
function randomId(): string {
  const digits = [...crypto.getRandomValues(new Uint8Array(17))].map((b) => b % 10).join("");
  return `${1 + ((crypto.getRandomValues(new Uint8Array(1))[0] as number) % 9)}${digits}`;
}

/** An order row of a fresh user, in the given status, for a real seckill voucher (so the price is known). */
async function seedOrder(t: ServedApp, status: number): Promise<{ orderId: string; userId: number; token: string }> {
  const { voucherId } = await createSeckill(t, { stock: 10, payValue: 4200 });
  const userId = userIds(1)[0] as number;
  const orderId = randomId();
  await t.deps.db.execute("INSERT INTO tb_voucher_order (id, user_id, voucher_id, status) VALUES (?, ?, ?, ?)", [
    BigInt(orderId),
    userId,
    voucherId,
    status,
  ]);
  const [token] = await sessionsFor(t, [userId]);
  return { orderId, userId, token: token as string };
}

/** A pending payment row, as startPayment leaves it once the provider accepted the charge. */
async function seedPendingPayment(t: ServedApp, orderId: string, userId: number): Promise<string> {
  const paymentId = randomId();
  await t.deps.db.execute(
    "INSERT INTO tb_payment (id, order_id, user_id, amount, status, provider_ref) VALUES (?, ?, ?, 4200, 1, 'lp_seeded')",
    [BigInt(paymentId), BigInt(orderId), userId],
  );
  return paymentId;
}

/** Delivers a webhook the way the provider (or a forger holding the secret) does: signed, over the route. */
async function webhook(
  t: ServedApp,
  event: Record<string, string>,
): Promise<{ status: number; body: Envelope<{ outcome: string }> }> {
  const body = JSON.stringify({ providerRef: "lp_test", ...event });
  const sig = await signWebhook(t.deps.config.PAYMENT_WEBHOOK_SECRET, body, Date.now());
  return await call<{ outcome: string }>(t.app, "POST", PAYMENT_WEBHOOK_PATH, {
    body,
    headers: { "content-type": "application/json", "x-payment-signature": sig },
  });
}

async function orderStatus(t: ServedApp, orderId: string): Promise<number> {
  const row = (await t.deps.db.execute("SELECT status FROM tb_voucher_order WHERE id = ?", [BigInt(orderId)]))
    .rows[0] as { status: number } | undefined;
  return Number(row?.status);
}

async function paymentsOf(t: ServedApp, orderId: string): Promise<{ id: string; status: number }[]> {
  const rows = (
    await t.deps.db.execute("SELECT id, status FROM tb_payment WHERE order_id = ? ORDER BY id", [BigInt(orderId)])
  ).rows as { id: string; status: number }[];
  return rows.map((r) => ({ id: String(r.id), status: Number(r.status) }));
}

async function refundsAtOperatorRoute(t: ServedApp, orderId: string): Promise<RefundView[]> {
  const res = await call<RefundView[]>(t.app, "GET", `/admin/refunds?orderId=${orderId}`, { token: operator(t) });
  expect(res.status).toBe(200);
  return res.body.data as RefundView[];
}

describe("payment webhooks out of order", () => {
  test("a payment.succeeded that follows a payment.failed for the same payment pays the order; a late failure changes nothing", async () => {
    const t = await serveTestApp(ENV);
    try {
      const { orderId, userId } = await seedOrder(t, Status.unpaid);
      const paymentId = await seedPendingPayment(t, orderId, userId);
      // A forged (or merely early) failure, then the provider's real success.
      expect((await webhook(t, { type: "payment.failed", paymentId })).body.data?.outcome).toBe("declined");
      expect((await webhook(t, { type: "payment.succeeded", paymentId })).body.data?.outcome).toBe("paid");
      expect(await orderStatus(t, orderId)).toBe(Status.paid);
      expect(await paymentsOf(t, orderId)).toEqual([{ id: paymentId, status: 2 }]);
      // Redeliveries, in either order, are duplicates and the order stays paid with no refund.
      expect((await webhook(t, { type: "payment.failed", paymentId })).body.data?.outcome).toBe("duplicate");
      expect((await webhook(t, { type: "payment.succeeded", paymentId })).body.data?.outcome).toBe("duplicate");
      expect(await orderStatus(t, orderId)).toBe(Status.paid);
      expect(await refundsAtOperatorRoute(t, orderId)).toEqual([]);
    } finally {
      await t.settle();
      await t.stop();
    }
  });

  test("a payment.succeeded that follows a payment.failed after the order was closed is refunded and the order ends refunded", async () => {
    const t = await serveTestApp(ENV);
    try {
      const { orderId, userId } = await seedOrder(t, Status.unpaid);
      const paymentId = await seedPendingPayment(t, orderId, userId);
      expect((await webhook(t, { type: "payment.failed", paymentId })).body.data?.outcome).toBe("declined");
      // The order is closed in the meantime (pay timeout).
      await t.deps.db.execute("UPDATE tb_voucher_order SET status = ? WHERE id = ?", [
        Status.cancelled,
        BigInt(orderId),
      ]);
      expect((await webhook(t, { type: "payment.succeeded", paymentId })).body.data?.outcome).toBe("refund-requested");
      await eventually("refunded", async () => (await orderStatus(t, orderId)) === Status.refunded);
      const [refund] = await refundsAtOperatorRoute(t, orderId);
      expect(refund).toMatchObject({
        paymentId,
        orderId,
        amount: 4200,
        reason: "paid-after-close",
        state: "succeeded",
        attempts: 1,
        nextAttemptAt: null,
      });
    } finally {
      await t.settle();
      await t.stop();
    }
  });
});

describe("starting a payment", () => {
  test("20 concurrent pay calls for one order create one payment row and one provider charge, and every caller gets its paymentId", async () => {
    const hold = new Hold();
    const t = await serveTestApp(ENV, { wrap: (deps) => ({ ...deps, payments: hold.wrap(deps.payments, "charge") }) });
    try {
      const { orderId, token } = await seedOrder(t, Status.unpaid);
      let answered = 0;
      const calls = Array.from({ length: 20 }, () =>
        call<{ paymentId: string }>(t.app, "POST", `/api/voucher-order/${orderId}/pay`, { token }).finally(
          () => answered++,
        ),
      );
      // The winner is held inside the provider's charge; everyone else must answer meanwhile.
      await eventually("all but the charging caller answered", async () => answered === 19 || hold.held > 1);
      expect(hold.held).toBe(1);
      hold.release();
      const results = await Promise.all(calls);
      const rows = await paymentsOf(t, orderId);
      expect(rows.length).toBe(1);
      expect(results.every((r) => r.status === 200 && r.body.success)).toBe(true);
      expect(new Set(results.map((r) => r.body.data?.paymentId))).toEqual(new Set([rows[0]?.id]));
      // The one charge is the one that settles the order.
      await eventually("paid", async () => (await orderStatus(t, orderId)) === Status.paid);
      expect(hold.held).toBe(1);
      expect((await call(t.app, "POST", `/api/voucher-order/${orderId}/pay`, { token })).body).toMatchObject({
        success: false,
        code: "BAD_STATE",
      });
    } finally {
      hold.release();
      await t.settle();
      await t.stop();
    }
  });

  test("while a payment is pending, pay returns it without a new charge; after it fails, pay starts a new one", async () => {
    const faults = new Faults();
    const t = await serveTestApp(ENV, {
      wrap: (deps) => ({ ...deps, payments: faults.wrapPort("payments", deps.payments) }),
    });
    try {
      const { orderId, userId, token } = await seedOrder(t, Status.unpaid);
      const pending = await seedPendingPayment(t, orderId, userId);
      const again = await call<{ paymentId: string }>(t.app, "POST", `/api/voucher-order/${orderId}/pay`, { token });
      expect(again.body).toMatchObject({ success: true, data: { paymentId: pending } });
      expect(faults.calls.get("payments.charge") ?? 0).toBe(0);
      expect((await webhook(t, { type: "payment.failed", paymentId: pending })).body.data?.outcome).toBe("declined");
      const fresh = await call<{ paymentId: string }>(t.app, "POST", `/api/voucher-order/${orderId}/pay`, { token });
      expect(fresh.body.success).toBe(true);
      expect(fresh.body.data?.paymentId).not.toBe(pending);
      expect(faults.calls.get("payments.charge")).toBe(1);
      await eventually("paid by the new payment", async () => (await orderStatus(t, orderId)) === Status.paid);
    } finally {
      await t.settle();
      await t.stop();
    }
  });
});

describe("refund retries", () => {
  test("a refund whose provider call fails is retried by the refund-retry job until it succeeds, and the operator sees every state", async () => {
    const faults = new Faults();
    const t = await serveTestApp(ENV, {
      wrap: (deps) => ({ ...deps, payments: faults.wrapPort("payments", deps.payments) }),
    });
    try {
      const { orderId, userId } = await seedOrder(t, Status.cancelled);
      const paymentId = await seedPendingPayment(t, orderId, userId);
      // The provider is down for this order's refund: two requests fail, the third goes through.
      faults.on("payments.refund", "fail", {
        times: 2,
        when: (args) => (args[0] as RefundRequest).orderId === orderId,
      });

      expect((await webhook(t, { type: "payment.succeeded", paymentId })).body.data?.outcome).toBe("refund-requested");
      expect(await orderStatus(t, orderId)).toBe(Status.refunding);
      let [refund] = await refundsAtOperatorRoute(t, orderId);
      expect(refund).toMatchObject({ paymentId, state: "failed", attempts: 1, reason: "paid-after-close" });
      expect(refund?.lastError).toContain("injected fault");
      expect(typeof refund?.nextAttemptAt).toBe("string");

      // Not due yet: the job leaves it alone (backoff ≥ half the 60 s base).
      await retryRefunds(t.deps, Date.now());
      expect((await refundsAtOperatorRoute(t, orderId))[0]).toMatchObject({ state: "failed", attempts: 1 });

      // Due: the job asks again and fails again; the attempt is counted and rescheduled.
      const later = Date.now() + RETRY_MAX_MS + 60_000;
      await retryRefunds(t.deps, later);
      [refund] = await refundsAtOperatorRoute(t, orderId);
      expect(refund).toMatchObject({ state: "failed", attempts: 2 });

      // Due again: through the real cron registry this time; the provider accepts, its webhook confirms.
      const job = cronJobs.filter((j) => j.name === "refund-retry");
      expect(job.length).toBe(1);
      expect(await runCron(t.deps, undefined, later + RETRY_MAX_MS + 60_000, job)).toEqual([
        { name: "refund-retry", ok: true },
      ]);
      await eventually("refunded", async () => (await orderStatus(t, orderId)) === Status.refunded);
      [refund] = await refundsAtOperatorRoute(t, orderId);
      expect(refund).toMatchObject({ state: "succeeded", attempts: 3, nextAttemptAt: null });
      expect(refund?.lastError).toContain("injected fault");
      expect(typeof refund?.providerRef).toBe("string");

      // Settled refunds are never asked for again.
      await retryRefunds(t.deps, later + 10 * RETRY_MAX_MS);
      expect((await refundsAtOperatorRoute(t, orderId))[0]).toMatchObject({ state: "succeeded", attempts: 3 });
    } finally {
      await t.settle();
      await t.stop();
    }
  });

  test("a refund.failed webhook puts the refund back on the retry schedule; a later refund.succeeded completes it", async () => {
    // The provider accepts refund requests and reports later (here: the test, through the signed route).
    const asked: RefundRequest[] = [];
    const t = await serveTestApp(ENV, {
      wrap: (deps) => {
        const real = deps.payments;
        const reportsLater: PaymentProvider = {
          charge: (req, waitUntil) => real.charge(req, waitUntil),
          refund: async (req) => {
            asked.push(req);
            return { providerRef: `lr_${req.refundId}` };
          },
        };
        return { ...deps, payments: reportsLater };
      },
    });
    try {
      const { orderId, userId } = await seedOrder(t, Status.cancelled);
      const paymentId = await seedPendingPayment(t, orderId, userId);
      expect((await webhook(t, { type: "payment.succeeded", paymentId })).body.data?.outcome).toBe("refund-requested");
      const [requested] = await refundsAtOperatorRoute(t, orderId);
      expect(requested).toMatchObject({ state: "requested", attempts: 1, lastError: null });
      const refundId = requested?.id as string;

      expect((await webhook(t, { type: "refund.failed", refundId })).body.data?.outcome).toBe("refund-failed");
      expect((await webhook(t, { type: "refund.failed", refundId })).body.data?.outcome).toBe("duplicate");
      expect((await refundsAtOperatorRoute(t, orderId))[0]).toMatchObject({
        state: "failed",
        attempts: 1,
        lastError: "provider reported refund.failed",
      });
      expect(await orderStatus(t, orderId)).toBe(Status.refunding);

      await retryRefunds(t.deps, Date.now() + RETRY_MAX_MS + 60_000);
      expect(asked.filter((r) => r.refundId === refundId).length).toBe(2);
      expect((await refundsAtOperatorRoute(t, orderId))[0]).toMatchObject({ state: "requested", attempts: 2 });

      expect((await webhook(t, { type: "refund.succeeded", refundId })).body.data?.outcome).toBe("refunded");
      expect(await orderStatus(t, orderId)).toBe(Status.refunded);
      expect((await refundsAtOperatorRoute(t, orderId))[0]).toMatchObject({
        state: "succeeded",
        attempts: 2,
        nextAttemptAt: null,
      });
    } finally {
      await t.settle();
      await t.stop();
    }
  });

  test("the refunds route is operator-only and rejects malformed filters with a 400 envelope", async () => {
    const t = await serveTestApp(ENV);
    try {
      const [userToken] = await sessionsFor(t, userIds(1));
      expect((await call(t.app, "GET", "/admin/refunds")).status).toBe(401);
      expect((await call(t.app, "GET", "/admin/refunds", { token: userToken })).status).toBe(401);
      for (const q of [
        "state=lost",
        "limit=0",
        "limit=1000",
        "orderId=abc",
        "orderId=0012",
        "orderId=99999999999999999999",
      ]) {
        const r = await call(t.app, "GET", `/admin/refunds?${q}`, { token: operator(t) });
        expect(r.status, q).toBe(400);
        expect(r.body.code).toBe("INVALID_INPUT");
      }
      const open = await call<RefundView[]>(t.app, "GET", "/admin/refunds?state=open&limit=5", { token: operator(t) });
      expect(open.status).toBe(200);
      expect(open.body.data?.every((r) => r.state === "requested" || r.state === "failed")).toBe(true);
    } finally {
      await t.stop();
    }
  });
});

describe("webhook secret configuration", () => {
  test("an env without PAYMENT_WEBHOOK_SECRET, or with a short one, is rejected by parseEnv", async () => {
    const { PAYMENT_WEBHOOK_SECRET: secret, ...rest } = (await getStack()).env;
    expect(() => parseEnv(rest)).toThrow(/PAYMENT_WEBHOOK_SECRET is required/);
    expect(() => parseEnv({ ...rest, PAYMENT_WEBHOOK_SECRET: "" })).toThrow(/PAYMENT_WEBHOOK_SECRET is required/);
    expect(() => parseEnv({ ...rest, PAYMENT_WEBHOOK_SECRET: "too-short" })).toThrow(
      /PAYMENT_WEBHOOK_SECRET must be at least 16/,
    );
    expect(parseEnv({ ...rest, PAYMENT_WEBHOOK_SECRET: secret }).PAYMENT_WEBHOOK_SECRET).toBe(secret as string);
  });

  test("the local stack hands the app its own random secret, not a well-known value", async () => {
    const secret = (await getStack()).env.PAYMENT_WEBHOOK_SECRET as string;
    expect(secret).toMatch(/^whsec_[0-9a-f]{32}$/);
    expect(secret).not.toBe("local-payment-webhook-secret");
  });
});

import { describe, expect, test } from "bun:test";
import { keys } from "../../src/redis/keys.ts";
import { signWebhook } from "../../src/payments/signature.ts";
import type { PaymentProvider } from "../../src/payments/provider.ts";
import { closeOrder, writeOrder } from "../../src/services/seckill/orders.ts";
import { reserve } from "../../src/services/seckill/reserve.ts";
import { settleWebhook } from "../../src/services/seckill/payments.ts";
import type { Reservation } from "../../src/services/seckill/types.ts";
import { CommandCount } from "../support/command-count.ts";
import { call, loginAs } from "../support/http.ts";
import { qstashSignature } from "../support/qstash-sign.ts";
import { Faults } from "../support/faults.ts";
import { createSeckill, mysqlCounts, userIds } from "../support/seckill.ts";
import { createTestApp, eventually, serveTestApp, type ServedApp } from "../support/stack.ts";
import { ORDER_CLOSE_PATH, ORDER_WRITE_PATH, PAYMENT_WEBHOOK_PATH } from "../../src/queue/messages.ts";

const ENV = {
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: "0",
  LOCAL_PAYMENT_DELAY_MS: "0",
};

async function orderRow(t: ServedApp, id: string) {
  return (await t.deps.db.execute("SELECT status, pay_time FROM tb_voucher_order WHERE id = ?", [BigInt(id)]))
    .rows[0] as { status: number; pay_time: string | null } | undefined;
}

async function signedPost(
  t: ServedApp,
  path: string,
  body: unknown,
  opts: { key?: string; signedPath?: string; expSec?: number; nowSec?: number } = {},
) {
  const raw = JSON.stringify(body);
  const signature = await qstashSignature({
    key: opts.key ?? t.deps.config.QSTASH_CURRENT_SIGNING_KEY,
    url: `${t.url}${opts.signedPath ?? path}`,
    body: raw,
    expSec: opts.expSec,
    nowSec: opts.nowSec,
  });
  return await call(t.app, "POST", path, {
    body: raw,
    headers: { "content-type": "application/json", "upstash-signature": signature },
  });
}

/** A served app whose order messages are dropped: the test delivers callbacks itself. */
async function serveWithoutQueue(env: Record<string, string> = {}) {
  const faults = new Faults().on("queue.batchJSON", "drop");
  return await serveTestApp({ ...ENV, ...env }, { wrap: (deps) => faults.wrap(deps) });
}

/** Reserves one unit for a fresh user and returns the reservation as the outbox holds it. */
async function reserveOne(t: ServedApp, voucherId: number, userId = userIds(1)[0] as number): Promise<Reservation> {
  const r = await reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" });
  if (!r.ok) throw new Error(`reserve failed: ${JSON.stringify(r)}`);
  const cfg = (await t.deps.redis.smembers(keys.seckill.active()))
    .map(String)
    .find((m) => m.endsWith(`:${voucherId}`)) as string;
  const shopId = Number(cfg.split(":")[0]);
  const raw = await t.deps.redis.hget<Reservation | string>(keys.seckill.outbox(shopId), r.orderId);
  return (typeof raw === "string" ? JSON.parse(raw) : raw) as Reservation;
}

describe("order writer and close callbacks", () => {
  test("a write delivered three times creates one order and takes one unit of MySQL stock", async () => {
    const t = await serveWithoutQueue();
    try {
      const { voucherId } = await createSeckill(t, { stock: 5 });
      const r = await reserveOne(t, voucherId);
      const outcomes = await Promise.all([1, 2, 3].map(() => signedPost(t, ORDER_WRITE_PATH, r)));
      expect(outcomes.every((o) => o.status === 200)).toBe(true);
      await t.settle();
      expect(await mysqlCounts(t, voucherId)).toEqual({ orders: 1, active: 1, stock: 4 });
    } finally {
      await t.settle();
      await t.stop();
    }
  });

  test("unsigned, wrongly signed, expired and cross-route callbacks are rejected with 401 and change nothing", async () => {
    const t = await serveWithoutQueue();
    try {
      const { voucherId } = await createSeckill(t, { stock: 5 });
      const r = await reserveOne(t, voucherId);
      const raw = JSON.stringify(r);
      const unsigned = await call(t.app, "POST", ORDER_WRITE_PATH, {
        body: raw,
        headers: { "content-type": "application/json" },
      });
      expect(unsigned.status).toBe(401);
      expect((await signedPost(t, ORDER_WRITE_PATH, r, { key: "sig_not_the_right_key" })).status).toBe(401);
      const past = Math.floor(Date.now() / 1000) - 3600;
      expect((await signedPost(t, ORDER_WRITE_PATH, r, { nowSec: past, expSec: past + 300 })).status).toBe(401);
      expect((await signedPost(t, ORDER_CLOSE_PATH, r, { signedPath: ORDER_WRITE_PATH })).status).toBe(401);
      // A valid signature over a different body than the one sent.
      const sig = await qstashSignature({
        key: t.deps.config.QSTASH_CURRENT_SIGNING_KEY,
        url: `${t.url}${ORDER_WRITE_PATH}`,
        body: raw,
      });
      const tampered = await call(t.app, "POST", ORDER_WRITE_PATH, {
        body: JSON.stringify({ ...r, userId: 1 }),
        headers: { "content-type": "application/json", "upstash-signature": sig },
      });
      expect(tampered.status).toBe(401);
      expect((await mysqlCounts(t, voucherId)).orders).toBe(0);
      const badBody = await signedPost(t, ORDER_WRITE_PATH, { orderId: "x" });
      expect(badBody.status).toBe(400);
    } finally {
      await t.settle();
      await t.stop();
    }
  });

  test("close cancels an unpaid order past its deadline and releases its unit once, however often it is delivered", async () => {
    const clock = { skewMs: 0, now: () => Date.now() + clock.skewMs };
    const t = await serveTestApp(ENV, { clock });
    try {
      const { shopId, voucherId } = await createSeckill(t, { stock: 3 });
      const r = await reserveOne(t, voucherId);
      await writeOrder(t.deps, r);
      // Before the deadline a (signed) close changes nothing.
      const early = await signedPost(t, ORDER_CLOSE_PATH, { shopId, orderIds: [r.orderId] });
      expect(early.body).toMatchObject({ success: true, data: { cancelled: 0, outcomes: { [r.orderId]: "not-due" } } });
      expect(Number((await orderRow(t, r.orderId))?.status)).toBe(1);
      clock.skewMs = 86_400_000 + 60_000;
      const results = await Promise.all(
        [1, 2, 3, 4].map(() => signedPost(t, ORDER_CLOSE_PATH, { shopId, orderIds: [r.orderId] })),
      );
      expect(results.every((x) => x.status === 200)).toBe(true);
      expect(results.map((x) => (x.body.data as { cancelled: number }).cancelled).reduce((a, b) => a + b, 0)).toBe(1);
      expect(Number((await orderRow(t, r.orderId))?.status)).toBe(4);
      expect(await mysqlCounts(t, voucherId)).toEqual({ orders: 1, active: 0, stock: 3 });
      expect(Number(await t.deps.redis.get(keys.seckill.stock(shopId, voucherId, 0)))).toBe(3);
      expect(await t.deps.redis.sismember(keys.seckill.buyers(shopId, voucherId), String(r.userId))).toBe(0);
      // The user may buy again after the release (the clock goes back to now so the sale is open).
      clock.skewMs = 0;
      expect((await reserve(t.deps, { voucherId, userId: r.userId, ip: "10.0.0.1" })).ok).toBe(true);
    } finally {
      await t.settle();
      await t.stop();
    }
  });

  test("a close naming a reservation that is not in the outbox, or carrying a made-up one, changes nothing", async () => {
    const clock = { skewMs: 0, now: () => Date.now() + clock.skewMs };
    const t = await serveTestApp(ENV, { clock });
    try {
      const { shopId, voucherId } = await createSeckill(t, { stock: 3 });
      const real = await reserveOne(t, voucherId);
      await writeOrder(t.deps, real);
      clock.skewMs = 86_400_000 + 60_000;
      const fakeId = `${BigInt(real.orderId) + 1n}`;
      const invented = {
        orderId: fakeId,
        userId: 777,
        voucherId,
        shopId,
        reservedAt: Date.now() - 86_400_000 * 2,
        amount: 1,
      };
      // Today's body shape, and the older one that carried a whole reservation.
      for (const body of [{ shopId, orderIds: [fakeId] }, invented, { orderId: fakeId }]) {
        const res = await signedPost(t, ORDER_CLOSE_PATH, body);
        expect(res.status).toBe(200);
        expect(res.body.data).toMatchObject({ cancelled: 0, cancelledBeforeWrite: 0, released: 0 });
      }
      expect(await orderRow(t, fakeId)).toBeUndefined();
      expect(Number(await t.deps.redis.get(keys.seckill.stock(shopId, voucherId, 0)))).toBe(2);
      expect(await mysqlCounts(t, voucherId)).toEqual({ orders: 1, active: 1, stock: 2 });
      // A shop id that is not the reservation's does not reach it either.
      const wrongShop = await signedPost(t, ORDER_CLOSE_PATH, { shopId: shopId + 1000, orderIds: [fakeId] });
      expect(wrongShop.body.data).toMatchObject({ cancelled: 0, released: 0 });
      expect((await signedPost(t, ORDER_CLOSE_PATH, { shopId, orderIds: [] })).status).toBe(400);
      expect((await signedPost(t, ORDER_CLOSE_PATH, { shopId: -1, orderIds: [fakeId] })).status).toBe(400);
    } finally {
      await t.settle();
      await t.stop();
    }
  });

  test("a close that arrives before the write cancels the reservation; the late write is then a no-op", async () => {
    const t = await serveWithoutQueue();
    try {
      const { shopId, voucherId } = await createSeckill(t, { stock: 2 });
      const r = await reserveOne(t, voucherId);
      expect(await closeOrder(t.deps, r.orderId)).toBe("cancelled-before-write");
      expect(await writeOrder(t.deps, r)).toBe("exists");
      expect(await mysqlCounts(t, voucherId)).toEqual({ orders: 1, active: 0, stock: 2 });
      expect(Number(await t.deps.redis.get(keys.seckill.stock(shopId, voucherId, 0)))).toBe(2);
      expect(await t.deps.redis.hlen(keys.seckill.outbox(shopId))).toBe(0);
    } finally {
      await t.settle();
      await t.stop();
    }
  });
});

describe("orders through the API", () => {
  test("the owner sees a queued order, then unpaid, pays through the provider webhook and sees paid; others see nothing", async () => {
    const t = await serveTestApp(ENV);
    try {
      const { voucherId } = await createSeckill(t, { stock: 5 });
      const owner = await loginAs(t.app, t.deps);
      const other = await loginAs(t.app, t.deps);
      const res = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: owner.token });
      const id = res.body.data as string;
      expect(typeof id).toBe("string");
      const first = await call<{ status: string; id: string }>(t.app, "GET", `/api/voucher-order/${id}`, {
        token: owner.token,
      });
      expect(["queued", "unpaid"]).toContain(first.body.data?.status as string);
      expect(first.body.data?.id).toBe(id);
      await eventually("order written", async () => (await orderRow(t, id)) !== undefined);
      expect(
        (await call<{ status: string }>(t.app, "GET", `/api/voucher-order/${id}`, { token: owner.token })).body.data
          ?.status,
      ).toBe("unpaid");
      // Another user can neither read nor pay it.
      expect((await call(t.app, "GET", `/api/voucher-order/${id}`, { token: other.token })).body).toMatchObject({
        success: false,
        code: "NOT_FOUND",
      });
      expect((await call(t.app, "POST", `/api/voucher-order/${id}/pay`, { token: other.token })).body).toMatchObject({
        success: false,
        code: "NOT_FOUND",
      });
      expect(Number((await orderRow(t, id))?.status)).toBe(1);
      const pay = await call<{ paymentId: string }>(t.app, "POST", `/api/voucher-order/${id}/pay`, {
        token: owner.token,
      });
      expect(pay.body.success).toBe(true);
      await eventually("paid", async () => Number((await orderRow(t, id))?.status) === 2);
      expect(
        (
          await call<{ status: string; payTime: string }>(t.app, "GET", `/api/voucher-order/${id}`, {
            token: owner.token,
          })
        ).body.data?.status,
      ).toBe("paid");
      expect((await call(t.app, "POST", `/api/voucher-order/${id}/pay`, { token: owner.token })).body).toMatchObject({
        success: false,
        code: "BAD_STATE",
      });
      const mine = await call<{ id: string; status: string }[]>(t.app, "GET", "/api/voucher-order/of/me", {
        token: owner.token,
      });
      expect(mine.body.data?.map((o) => o.id)).toEqual([id]);
      expect(
        (await call<unknown[]>(t.app, "GET", "/api/voucher-order/of/me", { token: other.token })).body.data,
      ).toEqual([]);
      // A paid order is not closed by a late close message.
      expect(await closeOrder(t.deps, id)).toBe("not-unpaid");
    } finally {
      await t.settle();
      await t.stop();
    }
  });

  test("malformed order input is a 400 envelope; no token is 401", async () => {
    const t = await serveTestApp(ENV);
    try {
      const { token } = await loginAs(t.app, t.deps);
      for (const [method, path] of [
        ["POST", "/api/voucher-order/seckill/abc"],
        ["POST", "/api/voucher-order/seckill/0"],
        ["GET", "/api/voucher-order/12ab"],
        ["GET", "/api/voucher-order/99999999999999999999"],
        ["GET", "/api/voucher-order/-5"],
        ["POST", "/api/voucher-order/0012/pay"],
        ["GET", "/api/voucher-order/of/me?current=0"],
      ] as const) {
        const r = await call(t.app, method, path, { token });
        expect(r.status, path).toBe(400);
        expect(r.body.code).toBe("INVALID_INPUT");
      }
      expect((await call(t.app, "POST", "/api/voucher-order/seckill/1")).status).toBe(401);
      expect((await call(t.app, "POST", "/api/voucher-order/seckill/987654321", { token })).body).toMatchObject({
        success: false,
        code: "NOT_FOUND",
      });
    } finally {
      await t.stop();
    }
  });

  test("sale window, daily shop limit and sliding-window rate limits", async () => {
    const t = await serveTestApp({ ...ENV, SECKILL_USER_LIMIT: "3", SECKILL_USER_WINDOW_MS: "60000" });
    try {
      const now = Date.now();
      const future = await createSeckill(t, { stock: 5, beginMs: now + 3600_000, endMs: now + 7200_000 });
      const past = await createSeckill(t, { stock: 5, beginMs: now - 7200_000, endMs: now - 3600_000 });
      const [u1, u2] = userIds(2) as [number, number];
      expect(await reserve(t.deps, { voucherId: future.voucherId, userId: u1, ip: "1.1.1.1" })).toMatchObject({
        ok: false,
        reason: "NOT_STARTED",
      });
      expect(await reserve(t.deps, { voucherId: past.voucherId, userId: u1, ip: "1.1.1.1" })).toMatchObject({
        ok: false,
        reason: "ENDED",
      });
      // Two vouchers of one shop with "at most 1 per user per day across the shop".
      const a = await createSeckill(t, { stock: 5, shopDailyLimit: 1 });
      const b = await createSeckill(t, { stock: 5, shopDailyLimit: 1, shopId: a.shopId });
      expect((await reserve(t.deps, { voucherId: a.voucherId, userId: u2, ip: "1.1.1.2" })).ok).toBe(true);
      expect(await reserve(t.deps, { voucherId: b.voucherId, userId: u2, ip: "1.1.1.2" })).toMatchObject({
        ok: false,
        reason: "LIMIT_REACHED",
      });
      // Per-user attempts: 3 per window, counted even when the attempt fails (duplicate).
      const { token } = await loginAs(t.app, t.deps);
      const statuses: (string | number)[] = [];
      for (let i = 0; i < 4; i++) {
        // Forget the isolate's holder memo so every attempt reaches Redis (the memo answers a
        // holder's retries itself; see the test below).
        t.deps.isolate.seckill.forgetHolders();
        const r = await call(t.app, "POST", `/api/voucher-order/seckill/${a.voucherId}`, { token });
        statuses.push(r.status === 429 ? 429 : (r.body.code ?? "OK"));
      }
      expect(statuses).toEqual(["OK", "DUPLICATE_ORDER", "DUPLICATE_ORDER", 429]);
    } finally {
      await t.settle();
      await t.stop();
    }
  });

  test("a buyer who tries again learns the order they hold: from the isolate with no Redis call, or from another isolate once it is written", async () => {
    const count = new CommandCount();
    const t = await serveTestApp(ENV, { wrap: (deps) => ({ ...deps, redis: count.wrap(deps.redis) }) });
    try {
      const { voucherId } = await createSeckill(t, { stock: 5 });
      const { token } = await loginAs(t.app, t.deps);
      const reservedBefore = count.get("reserve");
      const first = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token });
      const id = first.body.data as string;
      expect(first.body.success).toBe(true);
      // The first attempt ran the reservation script (so the count below can see it).
      expect(count.get("reserve") - reservedBefore).toBeGreaterThanOrEqual(1);
      await t.settle();
      // The reply was lost; the buyer taps again on the same isolate.
      const before = t.stack.rest.stats().commands;
      const reserved = count.get("reserve");
      const again = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token });
      expect(again.body).toMatchObject({ success: false, code: "DUPLICATE_ORDER", data: id });
      await t.settle();
      // The reservation script did not run; only the session upkeep (if due) may touch Redis.
      expect(count.get("reserve") - reserved).toBe(0);
      expect(t.stack.rest.stats().commands - before).toBeLessThanOrEqual(2);
      // Another isolate, once the writer has the order: Redis says duplicate, MySQL names the order.
      await eventually("order written", async () => (await orderRow(t, id)) !== undefined);
      const other = await createTestApp(ENV);
      const elsewhere = await call<string>(other.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token });
      expect(elsewhere.body).toMatchObject({ success: false, code: "DUPLICATE_ORDER", data: id });
    } finally {
      await t.settle();
      await t.stop();
    }
  });

  test("per-address limit across users, and the isolate's sold-out memo answers without Redis", async () => {
    const t = await serveTestApp({
      ...ENV,
      SECKILL_IP_LIMIT: "5",
      SECKILL_IP_WINDOW_MS: "60000",
      SOLD_OUT_MEMO_MS: "60000",
    });
    try {
      const { voucherId } = await createSeckill(t, { stock: 100 });
      const results = [];
      for (const userId of userIds(7)) results.push(await reserve(t.deps, { voucherId, userId, ip: "9.9.9.9" }));
      expect(results.map((r) => r.ok)).toEqual([true, true, true, true, true, false, false]);
      expect(results[5]).toMatchObject({ reason: "RATE_LIMITED" });
      const tiny = await createSeckill(t, { stock: 1 });
      await reserve(t.deps, { voucherId: tiny.voucherId, userId: userIds(1)[0] as number, ip: "8.8.8.1" });
      expect(
        await reserve(t.deps, { voucherId: tiny.voucherId, userId: userIds(1)[0] as number, ip: "8.8.8.2" }),
      ).toMatchObject({ reason: "SOLD_OUT" });
      await t.settle();
      const before = t.stack.rest.stats().requests;
      for (let i = 0; i < 20; i++)
        expect(
          await reserve(t.deps, { voucherId: tiny.voucherId, userId: userIds(1)[0] as number, ip: "8.8.8.3" }),
        ).toMatchObject({ reason: "SOLD_OUT" });
      expect(t.stack.rest.stats().requests - before).toBe(0);
    } finally {
      await t.settle();
      await t.stop();
    }
  });
});

describe("pay vs close", () => {
  /** A provider that accepts everything and records refund requests; no webhooks (the test settles directly). */
  function recordingProvider(): PaymentProvider & { refunds: string[] } {
    const refunds: string[] = [];
    return {
      refunds,
      charge: async () => ({ providerRef: "test" }),
      refund: async (req) => {
        refunds.push(req.orderId);
        return { providerRef: "test-refund" };
      },
    };
  }

  /**
   * Started together, the close wins about 99 rounds in 100 (it has fewer round trips before the
   * step that decides), so 500 rounds could pass without a single payment winning. Half the rounds
   * give the payment a head start of up to 2 ms — both calls still overlap in flight — so both
   * outcomes come up every run (about 1 in 3 paid; measured).
   */
  const headStart = () =>
    Math.random() < 0.5 ? Promise.resolve() : new Promise<void>((r) => setTimeout(r, Math.random() * 2));

  test("pay and close racing 500 times: exactly one wins each time, both sides win some rounds, and every lost payment is refunded", async () => {
    const provider = recordingProvider();
    const t = await serveTestApp(ENV, { payments: provider });
    try {
      const rounds = 500;
      const { shopId, voucherId } = await createSeckill(t, { stock: rounds });
      let paid = 0;
      let cancelled = 0;
      for (let i = 0; i < rounds; i++) {
        const r = await reserveOne(t, voucherId);
        await writeOrder(t.deps, r);
        const paymentId = `${BigInt(r.orderId) + 7n}`;
        await t.deps.db.execute(
          "INSERT INTO tb_payment (id, order_id, user_id, amount, status) VALUES (?, ?, ?, ?, 1)",
          [BigInt(paymentId), BigInt(r.orderId), r.userId, r.amount],
        );
        const [settled, closed] = await Promise.all([
          settleWebhook(t.deps, { type: "payment.succeeded", paymentId, providerRef: "x" }),
          headStart().then(() => closeOrder(t.deps, r.orderId)),
        ]);
        const status = Number((await orderRow(t, r.orderId))?.status);
        if (settled === "paid") {
          expect(closed).toBe("not-unpaid");
          expect(status).toBe(2);
          paid++;
        } else {
          expect(settled).toBe("refund-requested");
          expect(closed).toBe("cancelled");
          expect(status).toBe(5);
          cancelled++;
        }
      }
      expect(paid + cancelled).toBe(rounds);
      // A race, not a schedule: each outcome at least once, or one branch above went untested.
      expect(paid).toBeGreaterThan(0);
      expect(cancelled).toBeGreaterThan(0);
      const refunds = (
        await t.deps.db.execute(
          "SELECT COUNT(*) AS n FROM tb_refund r JOIN tb_voucher_order o ON o.id = r.order_id WHERE o.voucher_id = ?",
          [voucherId],
        )
      ).rows[0] as { n: string };
      expect(Number(refunds.n)).toBe(cancelled);
      expect(provider.refunds.length).toBe(cancelled);
      // Every cancelled order's unit is back, in MySQL and in Redis.
      expect(await mysqlCounts(t, voucherId)).toMatchObject({ active: paid, stock: rounds - paid });
      expect(Number(await t.deps.redis.get(keys.seckill.stock(shopId, voucherId, 0)))).toBe(rounds - paid);
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 120_000);

  test("a payment that lands after the close is refunded through the provider and the order ends refunded", async () => {
    const t = await serveTestApp(ENV);
    try {
      const { voucherId } = await createSeckill(t, { stock: 5 });
      const owner = await loginAs(t.app, t.deps);
      const me = (await call<{ id: number }>(t.app, "GET", "/api/user/me", { token: owner.token })).body.data
        ?.id as number;
      const r = await reserveOne(t, voucherId, me);
      await writeOrder(t.deps, r);
      const pay = await call<{ paymentId: string }>(t.app, "POST", `/api/voucher-order/${r.orderId}/pay`, {
        token: owner.token,
      });
      expect(pay.body.success).toBe(true);
      // The close wins the race against the provider's (delayed) webhook...
      expect(await closeOrder(t.deps, r.orderId)).toBe("cancelled");
      await eventually("refunded", async () => Number((await orderRow(t, r.orderId))?.status) === 6);
      const refund = (
        await t.deps.db.execute("SELECT reason, status FROM tb_refund WHERE order_id = ?", [BigInt(r.orderId)])
      ).rows[0] as { reason: string; status: number };
      expect(refund).toEqual({ reason: "paid-after-close", status: 2 });
    } finally {
      await t.settle();
      await t.stop();
    }
  });

  test("a payment that lands before the order row exists creates the row as paid; the late write changes nothing", async () => {
    const t = await serveWithoutQueue();
    try {
      const { shopId, voucherId } = await createSeckill(t, { stock: 5 });
      const r = await reserveOne(t, voucherId);
      const paymentId = `${BigInt(r.orderId) + 3n}`;
      await t.deps.db.execute("INSERT INTO tb_payment (id, order_id, user_id, amount, status) VALUES (?, ?, ?, ?, 1)", [
        BigInt(paymentId),
        BigInt(r.orderId),
        r.userId,
        r.amount,
      ]);
      expect(await settleWebhook(t.deps, { type: "payment.succeeded", paymentId, providerRef: "x" })).toBe(
        "paid-from-reservation",
      );
      expect(await settleWebhook(t.deps, { type: "payment.succeeded", paymentId, providerRef: "x" })).toBe("duplicate");
      expect(await writeOrder(t.deps, r)).toBe("exists");
      expect(Number((await orderRow(t, r.orderId))?.status)).toBe(2);
      expect(await mysqlCounts(t, voucherId)).toEqual({ orders: 1, active: 1, stock: 4 });
      expect(await t.deps.redis.hlen(keys.seckill.outbox(shopId))).toBe(0);
    } finally {
      await t.settle();
      await t.stop();
    }
  });

  test("a payment the provider declines leaves the order unpaid and payable again", async () => {
    const t = await serveTestApp({ ...ENV, LOCAL_PAYMENT_FAIL_RATE: "1" });
    try {
      const { voucherId } = await createSeckill(t, { stock: 5 });
      const owner = await loginAs(t.app, t.deps);
      const me = (await call<{ id: number }>(t.app, "GET", "/api/user/me", { token: owner.token })).body.data
        ?.id as number;
      const r = await reserveOne(t, voucherId, me);
      await eventually("order written", async () => (await orderRow(t, r.orderId)) !== undefined);
      const pay = await call<{ paymentId: string }>(t.app, "POST", `/api/voucher-order/${r.orderId}/pay`, {
        token: owner.token,
      });
      const paymentId = pay.body.data?.paymentId as string;
      await eventually("payment declined", async () => {
        const row = (await t.deps.db.execute("SELECT status FROM tb_payment WHERE id = ?", [BigInt(paymentId)]))
          .rows[0] as { status: number } | undefined;
        return Number(row?.status) === 3;
      });
      expect(Number((await orderRow(t, r.orderId))?.status)).toBe(1);
      expect(
        (await call(t.app, "POST", `/api/voucher-order/${r.orderId}/pay`, { token: owner.token })).body.success,
      ).toBe(true);
    } finally {
      await t.settle();
      await t.stop();
    }
  });

  test("payment webhooks must carry a valid, fresh signature", async () => {
    const t = await serveTestApp(ENV);
    try {
      const body = JSON.stringify({ type: "payment.succeeded", paymentId: "123", providerRef: "x" });
      const post = (sig?: string) =>
        call(t.app, "POST", PAYMENT_WEBHOOK_PATH, {
          body,
          headers: { "content-type": "application/json", ...(sig ? { "x-payment-signature": sig } : {}) },
        });
      expect((await post()).status).toBe(401);
      expect((await post(await signWebhook("another-secret-of-enough-length", body, Date.now()))).status).toBe(401);
      expect(
        (await post(await signWebhook(t.deps.config.PAYMENT_WEBHOOK_SECRET, body, Date.now() - 3600_000))).status,
      ).toBe(401);
      expect((await post("t=abc,v1=zz")).status).toBe(401);
      const ok = await post(await signWebhook(t.deps.config.PAYMENT_WEBHOOK_SECRET, body, Date.now()));
      expect(ok.status).toBe(200);
      expect(ok.body).toMatchObject({ success: true, data: { outcome: "unknown-payment" } });
    } finally {
      await t.stop();
    }
  });
});

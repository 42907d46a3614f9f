/**
 * Zero lost, zero duplicate orders under injected faults. Each test disturbs one port on command
 * (tests/support/faults.ts), then runs one cron pass and checks that every reservation ended as
 * exactly one order (or one release) and that Redis and MySQL agree on the stock.
 */
import { describe, expect, test } from "bun:test";
import { runCron } from "../../src/jobs/index.ts";
import { keys } from "../../src/redis/keys.ts";
import { reserve } from "../../src/services/seckill/reserve.ts";
import type { Reservation } from "../../src/services/seckill/types.ts";
import { call } from "../support/http.ts";
import { Faults } from "../support/faults.ts";
import { qstashSignature } from "../support/qstash-sign.ts";
import { createSeckill, mysqlCounts, userIds } from "../support/seckill.ts";
import { eventually, serveTestApp, type ServedApp } from "../support/stack.ts";

const ENV = {
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: "0",
  SOLD_OUT_MEMO_MS: "0",
  OUTBOX_REPUBLISH_AFTER_SECONDS: "1",
};

async function served(faults: Faults, env: Record<string, string> = {}): Promise<ServedApp> {
  return await serveTestApp({ ...ENV, ...env }, { wrap: (deps) => faults.wrap(deps) });
}

/** One pass of every cron job, with the clock far enough ahead that the sweep sees every entry. */
async function cronPass(t: ServedApp): Promise<void> {
  const results = await runCron(t.deps, undefined, Date.now() + 5_000);
  expect(results.every((r) => r.ok)).toBe(true);
}

/** Every user who got a unit in Redis has exactly one order in MySQL, and stock adds up on both sides. */
async function expectConsistent(t: ServedApp, shopId: number, voucherId: number, initial: number, buyers: number[]): Promise<void> {
  const rows = (await t.deps.db.execute("SELECT user_id, COUNT(*) AS n FROM tb_voucher_order WHERE voucher_id = ? GROUP BY user_id", [voucherId])).rows as { user_id: string; n: string }[];
  const perUser = new Map(rows.map((r) => [Number(r.user_id), Number(r.n)]));
  for (const u of buyers) expect(perUser.get(u) ?? 0).toBe(1);
  expect(rows.length).toBe(buyers.length);
  const m = await mysqlCounts(t, voucherId);
  const left = Number(await t.deps.redis.get(keys.seckill.stock(shopId, voucherId, 0)));
  expect(m.active).toBe(buyers.length);
  expect(m.stock).toBe(initial - buyers.length);
  expect(left).toBe(initial - buyers.length);
  expect(await t.deps.redis.hlen(keys.seckill.outbox(shopId))).toBe(0);
}

describe("zero lost orders", () => {
  test("the QStash publish fails after the reservation: the sweep re-publishes and every reservation becomes an order", async () => {
    const faults = new Faults();
    const t = await served(faults);
    try {
      const { shopId, voucherId } = await createSeckill(t, { stock: 50 });
      faults.on("queue.batchJSON", "fail", { times: 20 });
      const buyers = userIds(30);
      const res = await Promise.all(buyers.map((userId) => reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })));
      expect(res.every((r) => r.ok)).toBe(true);
      await t.settle();
      expect(faults.calls.get("queue.batchJSON")).toBe(30);
      await cronPass(t);
      await eventually("orders written", async () => (await mysqlCounts(t, voucherId)).orders === 30);
      await t.settle();
      await expectConsistent(t, shopId, voucherId, 50, buyers);
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 60_000);

  test("the process dies between the reservation and the response: the buyer saw an error, the cron pass still makes the order", async () => {
    const faults = new Faults();
    const t = await served(faults);
    try {
      const { shopId, voucherId } = await createSeckill(t, { stock: 10 });
      // The reserve script runs in Redis, then the reply is lost (and with it the publish).
      faults.on("redis.evalsha", "lose", { times: 1, when: (args) => args.length > 2 });
      faults.on("redis.eval", "lose", { times: 1, when: (args) => args.length > 2 });
      const [victim, other] = userIds(2) as [number, number];
      await expect(reserve(t.deps, { voucherId, userId: victim, ip: "10.0.0.1" })).rejects.toThrow("injected fault");
      faults.clear();
      expect((await reserve(t.deps, { voucherId, userId: other, ip: "10.0.0.1" })).ok).toBe(true);
      await t.settle();
      await cronPass(t);
      await eventually("both orders written", async () => (await mysqlCounts(t, voucherId)).orders === 2);
      await t.settle();
      await expectConsistent(t, shopId, voucherId, 10, [victim, other]);
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 60_000);

  test("the writer crashes before its commit: QStash retries and the order is written once", async () => {
    const faults = new Faults();
    const t = await served(faults);
    try {
      const { shopId, voucherId } = await createSeckill(t, { stock: 10 });
      faults.on("db.transaction", "fail", { times: 6 });
      const buyers = userIds(3);
      for (const userId of buyers) expect((await reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })).ok).toBe(true);
      await eventually("orders written after retries", async () => (await mysqlCounts(t, voucherId)).orders === 3, 30_000);
      await t.settle();
      expect(faults.calls.get("db.transaction")).toBeGreaterThanOrEqual(9);
      await cronPass(t);
      await expectConsistent(t, shopId, voucherId, 10, buyers);
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 60_000);

  test("the writer crashes after its commit (before acknowledging): the cron pass re-sends, nothing is written twice", async () => {
    const faults = new Faults();
    // No QStash retries: the cron pass alone must repair it.
    const t = await served(faults, { ORDER_MESSAGE_RETRIES: "0" });
    try {
      const { shopId, voucherId } = await createSeckill(t, { stock: 10 });
      faults.on("redis.multi", "fail", { times: 3 });
      const buyers = userIds(3);
      for (const userId of buyers) expect((await reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })).ok).toBe(true);
      await eventually("orders committed", async () => (await mysqlCounts(t, voucherId)).orders === 3);
      await Bun.sleep(200);
      await t.settle();
      // Committed but not acknowledged: the outbox still holds all three.
      expect(await t.deps.redis.hlen(keys.seckill.outbox(shopId))).toBe(3);
      await cronPass(t);
      await eventually("outbox acknowledged", async () => (await t.deps.redis.hlen(keys.seckill.outbox(shopId))) === 0);
      await t.settle();
      await expectConsistent(t, shopId, voucherId, 10, buyers);
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 60_000);
});

describe("at-least-once delivery", () => {
  test("every message delivered two or three times, shuffled: no duplicate order, each unit released exactly once", async () => {
    const faults = new Faults();
    const t = await served(faults, { ORDER_MESSAGE_RETRIES: "0" });
    try {
      const stock = 40;
      const { shopId, voucherId } = await createSeckill(t, { stock });
      faults.on("queue.batchJSON", "tap");
      const buyers = userIds(stock);
      for (const userId of buyers) expect((await reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })).ok).toBe(true);
      await t.settle();
      const batches = (faults.tapped.get("queue.batchJSON") ?? []).map((args) => args[0] as { url: string; body: unknown }[]);
      expect(batches.length).toBe(stock);
      const deliveries: { path: string; body: string }[] = [];
      for (const batch of batches) {
        for (const m of batch) {
          const copies = 2 + Math.floor(Math.random() * 2);
          for (let i = 0; i < copies; i++) deliveries.push({ path: new URL(m.url).pathname, body: JSON.stringify(m.body) });
        }
      }
      // Fisher–Yates: closes may arrive before writes, duplicates interleave.
      for (let i = deliveries.length - 1; i > 0; i--) {
        const j = Math.floor(Math.random() * (i + 1));
        [deliveries[i], deliveries[j]] = [deliveries[j] as (typeof deliveries)[0], deliveries[i] as (typeof deliveries)[0]];
      }
      const key = t.deps.config.QSTASH_CURRENT_SIGNING_KEY;
      const responses = await Promise.all(
        deliveries.map(async (d) => {
          const signature = await qstashSignature({ key, url: `${t.url}${d.path}`, body: d.body });
          return await call(t.app, "POST", d.path, { body: d.body, headers: { "content-type": "application/json", "upstash-signature": signature } });
        }),
      );
      // A transaction that lost a deadlock is a 500 that QStash would retry: deliver those again.
      const failed = responses.map((r, i) => (r.status === 200 ? -1 : i)).filter((i) => i >= 0);
      for (const i of failed) {
        const d = deliveries[i] as (typeof deliveries)[0];
        const signature = await qstashSignature({ key, url: `${t.url}${d.path}`, body: d.body });
        expect((await call(t.app, "POST", d.path, { body: d.body, headers: { "content-type": "application/json", "upstash-signature": signature } })).status).toBe(200);
      }
      const m = await mysqlCounts(t, voucherId);
      expect(m.orders).toBe(stock);
      expect(m.active).toBe(0);
      expect(m.stock).toBe(stock);
      expect(Number(await t.deps.redis.get(keys.seckill.stock(shopId, voucherId, 0)))).toBe(stock);
      expect(await t.deps.redis.scard(keys.seckill.released(shopId, voucherId))).toBe(stock);
      expect(await t.deps.redis.scard(keys.seckill.buyers(shopId, voucherId))).toBe(0);
      const reservations = batches.map((b) => b[0]?.body as Reservation);
      expect(new Set(reservations.map((r) => r.orderId)).size).toBe(stock);
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 60_000);
});

describe("close-expired", () => {
  test("lost close messages: the cron pass closes unpaid orders past the deadline and reservations that never reached MySQL", async () => {
    const faults = new Faults();
    const t = await served(faults, { ORDER_PAY_TIMEOUT_SECONDS: "600" });
    try {
      const { shopId, voucherId } = await createSeckill(t, { stock: 10 });
      faults.on("queue.batchJSON", "tap");
      const buyers = userIds(4);
      const reservations: Reservation[] = [];
      for (const userId of buyers) {
        const r = await reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" });
        if (!r.ok) throw new Error("reserve failed");
      }
      await t.settle();
      for (const args of faults.tapped.get("queue.batchJSON") ?? []) reservations.push((args[0] as { body: Reservation }[])[0]?.body as Reservation);
      const { writeOrder } = await import("../../src/services/seckill/orders.ts");
      for (const r of reservations.slice(0, 3)) await writeOrder(t.deps, r);
      // One of the written orders is paid: it must survive.
      await t.deps.db.execute("UPDATE tb_voucher_order SET status = 2 WHERE id = ?", [BigInt(reservations[0]?.orderId as string)]);
      // Before the deadline nothing is closed.
      await runCron(t.deps, undefined, Date.now() + 60_000);
      expect((await mysqlCounts(t, voucherId)).active).toBe(3);
      // Past it: two unpaid orders and the never-written reservation are closed, once.
      await runCron(t.deps, undefined, Date.now() + 601_000);
      await runCron(t.deps, undefined, Date.now() + 602_000);
      const m = await mysqlCounts(t, voucherId);
      expect(m).toEqual({ orders: 4, active: 1, stock: 9 });
      expect(Number(await t.deps.redis.get(keys.seckill.stock(shopId, voucherId, 0)))).toBe(9);
      expect(await t.deps.redis.hlen(keys.seckill.outbox(shopId))).toBe(0);
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 60_000);
});

describe("reconcile", () => {
  test("Redis drift is repaired and reported at /admin/reconcile", async () => {
    const faults = new Faults();
    const t = await served(faults);
    try {
      const { shopId, voucherId } = await createSeckill(t, { stock: 20 });
      const buyers = userIds(5);
      for (const userId of buyers) expect((await reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })).ok).toBe(true);
      await eventually("orders written", async () => (await mysqlCounts(t, voucherId)).orders === 5);
      await t.settle();
      // Drift: someone set the stock by hand, and a buyer vanished from the set.
      await t.deps.redis.set(keys.seckill.stock(shopId, voucherId, 0), 999);
      await t.deps.redis.srem(keys.seckill.buyers(shopId, voucherId), String(buyers[0]));
      await cronPass(t);
      const report = await call<{ vouchers: { voucherId: number; ok: boolean; drift: string[]; repaired: string[]; redisStock: number }[] }>(t.app, "GET", "/admin/reconcile", {
        token: `Bearer ${t.deps.config.ADMIN_TOKEN}`,
      });
      const mine = report.body.data?.vouchers.find((v) => v.voucherId === voucherId);
      expect(mine?.ok).toBe(false);
      expect(mine?.repaired.join(" ")).toContain("re-added 1 buyer");
      expect(mine?.redisStock).toBe(15);
      expect(Number(await t.deps.redis.get(keys.seckill.stock(shopId, voucherId, 0)))).toBe(15);
      // The next pass finds nothing to repair.
      await cronPass(t);
      const again = await call<{ vouchers: { voucherId: number; ok: boolean }[] }>(t.app, "GET", "/admin/reconcile", { token: `Bearer ${t.deps.config.ADMIN_TOKEN}` });
      expect(again.body.data?.vouchers.find((v) => v.voucherId === voucherId)?.ok).toBe(true);
      expect((await call(t.app, "GET", "/admin/reconcile")).status).toBe(401);
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 60_000);
});

/**
 * Zero lost, zero duplicate orders under injected faults. Each test disturbs one port on command
 * (tests/support/faults.ts), then runs one cron pass and checks that every reservation ended as
 * exactly one order (or one release) and that Redis and MySQL agree on the stock.
 */
import { describe, expect, test } from "bun:test";
import { runCron } from "../../src/jobs/index.ts";
import { keys } from "../../src/redis/keys.ts";
import { luaSources } from "../../src/redis/scripts.ts";
import { reserve } from "../../src/services/seckill/reserve.ts";
import type { Reservation } from "../../src/services/seckill/types.ts";
import { call } from "../support/http.ts";
import { Faults } from "../support/faults.ts";
import { qstashSignature } from "../support/qstash-sign.ts";
import { createSeckill, mysqlCounts, userIds } from "../support/seckill.ts";
import { eventually, serveTestApp, type ServedApp } from "../support/stack.ts";
import { ORDER_CLOSE_PATH, ORDER_DRAIN_PATH } from "../../src/queue/messages.ts";

const ENV = {
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: "0",
  SOLD_OUT_MEMO_MS: "0",
  OUTBOX_REPUBLISH_AFTER_SECONDS: "1",
};

async function sha1Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-1", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

async function served(faults: Faults, env: Record<string, string> = {}): Promise<ServedApp> {
  return await serveTestApp({ ...ENV, ...env }, { wrap: (deps) => faults.wrap(deps) });
}

/** One pass of every cron job, with the clock far enough ahead that the sweep sees every entry. */
async function cronPass(t: ServedApp): Promise<void> {
  const results = await runCron(t.deps, undefined, Date.now() + 5_000);
  expect(results.every((r) => r.ok)).toBe(true);
}

/**
 * Waits until `n` orders of the voucher are in MySQL AND the shop's outbox is empty. Both, not the
 * first alone: the writer acknowledges a group only after its MySQL commit (writer.ts, the
 * ack-after-commit invariant that makes a crash cost at most a repeated write), so the rows are
 * visible a Redis round trip before the entries leave the outbox — and the drain runs inside an
 * HTTP delivery from the QStash stand-in, which `t.settle()` does not wait for. On a loaded
 * machine that gap reached the final outbox check (it saw both entries of a committed group).
 * A reservation left in the outbox for good still fails here, by timeout.
 */
async function ordersDrained(
  t: ServedApp,
  shopId: number,
  voucherId: number,
  n: number,
  timeoutMs?: number,
): Promise<void> {
  await eventually(
    `${n} orders written and acknowledged`,
    async () =>
      (await mysqlCounts(t, voucherId)).orders === n && (await t.deps.redis.hlen(keys.seckill.outbox(shopId))) === 0,
    timeoutMs,
  );
}

/** Every user who got a unit in Redis has exactly one order in MySQL, and stock adds up on both sides. */
async function expectConsistent(
  t: ServedApp,
  shopId: number,
  voucherId: number,
  initial: number,
  buyers: number[],
): Promise<void> {
  const rows = (
    await t.deps.db.execute(
      "SELECT user_id, COUNT(*) AS n FROM tb_voucher_order WHERE voucher_id = ? GROUP BY user_id",
      [voucherId],
    )
  ).rows as { user_id: string; n: string }[];
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
      faults.on("queue.batchJSON", "fail");
      const buyers = userIds(30);
      const res = await Promise.all(buyers.map((userId) => reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })));
      expect(res.every((r) => r.ok)).toBe(true);
      await t.settle();
      // Drain announcements are batched: a burst of 30 costs a publish or two, not 30.
      const publishes = faults.calls.get("queue.batchJSON") ?? 0;
      expect(publishes).toBeGreaterThanOrEqual(1);
      expect(publishes).toBeLessThanOrEqual(3);
      expect((await mysqlCounts(t, voucherId)).orders).toBe(0);
      faults.clear();
      await cronPass(t);
      await ordersDrained(t, shopId, voucherId, 30);
      await t.settle();
      await expectConsistent(t, shopId, voucherId, 50, buyers);
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 60_000);

  test("the process dies between the reservation and the response: the buyer saw no order id, the cron pass still makes the order", async () => {
    const faults = new Faults();
    const t = await served(faults);
    try {
      const { shopId, voucherId } = await createSeckill(t, { stock: 10 });
      // The reserve script runs in Redis, then the reply is lost; so is the reply of the check that
      // settles it (lua/reserve-fence.lua), and the drain announcement never leaves the process.
      faults.on("redis.evalsha", "lose", { times: 2, when: (args) => args.length > 2 });
      faults.on("redis.eval", "lose", { times: 2, when: (args) => args.length > 2 });
      faults.on("queue.batchJSON", "drop", { times: 1 });
      const [victim, other] = userIds(2) as [number, number];
      expect(await reserve(t.deps, { voucherId, userId: victim, ip: "10.0.0.1" })).toMatchObject({
        ok: false,
        reason: "OUTCOME_UNKNOWN",
      });
      faults.clear();
      expect((await reserve(t.deps, { voucherId, userId: other, ip: "10.0.0.1" })).ok).toBe(true);
      await t.settle();
      await cronPass(t);
      await ordersDrained(t, shopId, voucherId, 2);
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
      // Two failed deliveries of the drain (QStash backs off e^(2.5n) s, scaled by the test stack's
      // 0.01: the third attempt comes ~1.6 s after the first); its retry writes the group.
      faults.on("db.transaction", "fail", { times: 2 });
      const buyers = userIds(3);
      for (const userId of buyers) expect((await reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })).ok).toBe(true);
      await ordersDrained(t, shopId, voucherId, 3, 30_000);
      await t.settle();
      expect(faults.calls.get("db.transaction")).toBeGreaterThanOrEqual(3);
      await cronPass(t);
      await expectConsistent(t, shopId, voucherId, 10, buyers);
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 60_000);

  test("the writer crashes after its commit (before acknowledging): the cron pass re-sends, nothing is written twice", async () => {
    const faults = new Faults();
    // No QStash retries: the cron pass alone must repair it. A short claim lease so the crashed
    // group becomes claimable again within the test.
    const t = await served(faults, { ORDER_MESSAGE_RETRIES: "0", ORDER_CLAIM_LEASE_MS: "1000" });
    try {
      const { shopId, voucherId } = await createSeckill(t, { stock: 10 });
      const ackSha = await sha1Hex(luaSources.ackOutbox);
      // Counts the acknowledgements refused (`calls` counts every EVALSHA, the reservations' too).
      let acksRefused = 0;
      faults.on("redis.evalsha", "fail", { when: (args) => args[0] === ackSha && ++acksRefused > 0 });
      const buyers = userIds(3);
      for (const userId of buyers) expect((await reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })).ok).toBe(true);
      await eventually("orders committed", async () => (await mysqlCounts(t, voucherId)).orders === 3);
      // The rows are visible before the writer's ack (ack-after-commit): wait for the ack itself,
      // and keep refusing acks until the outbox is checked, so no later drain (the next window's,
      // once the short lease is over) acknowledges the group before that check.
      await eventually("acknowledgement attempted", async () => acksRefused > 0);
      await t.settle();
      // Committed but not acknowledged: the outbox still holds all three.
      expect(await t.deps.redis.hlen(keys.seckill.outbox(shopId))).toBe(3);
      faults.clear();
      await eventually(
        "outbox acknowledged",
        async () => {
          await cronPass(t);
          return (await t.deps.redis.hlen(keys.seckill.outbox(shopId))) === 0;
        },
        20_000,
        200,
      );
      await t.settle();
      await expectConsistent(t, shopId, voucherId, 10, buyers);
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 60_000);
});

describe("at-least-once delivery", () => {
  test("drain and close messages delivered two or three times, shuffled, closes before writes: no duplicate order, each unit released exactly once", async () => {
    const faults = new Faults();
    const clock = { skewMs: 0, now: () => Date.now() + clock.skewMs };
    const t = await serveTestApp(
      { ...ENV, ORDER_MESSAGE_RETRIES: "0", ORDER_GROUP_MAX: "7" },
      { clock, wrap: (deps) => faults.wrap(deps) },
    );
    try {
      const stock = 40;
      const { shopId, voucherId } = await createSeckill(t, { stock });
      faults.on("queue.batchJSON", "tap");
      const buyers = userIds(stock);
      const ids: string[] = [];
      for (const userId of buyers) {
        const r = await reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" });
        if (!r.ok) throw new Error("reserve failed");
        ids.push(r.orderId);
      }
      await t.settle();
      const tapped = () =>
        (faults.tapped.get("queue.batchJSON") ?? []).flatMap((args) => args[0] as { url: string; body: unknown }[]);
      const drains = tapped().filter((m) => m.url.endsWith(ORDER_DRAIN_PATH));
      expect(drains.length).toBeGreaterThanOrEqual(1);
      // Everything is past its payment deadline from here on.
      clock.skewMs = 86_400_000 + 60_000;
      const deliveries: { path: string; body: string }[] = [];
      const copies = () => 2 + Math.floor(Math.random() * 2);
      for (const m of drains)
        for (let i = copies(); i > 0; i--) deliveries.push({ path: ORDER_DRAIN_PATH, body: JSON.stringify(m.body) });
      // Closes for groups of 5 ids: some arrive before their orders are written.
      for (let i = 0; i < ids.length; i += 5) {
        const body = JSON.stringify({ shopId, orderIds: ids.slice(i, i + 5) });
        for (let k = copies(); k > 0; k--) deliveries.push({ path: ORDER_CLOSE_PATH, body });
      }
      // Fisher–Yates.
      for (let i = deliveries.length - 1; i > 0; i--) {
        const j = Math.floor(Math.random() * (i + 1));
        [deliveries[i], deliveries[j]] = [
          deliveries[j] as (typeof deliveries)[0],
          deliveries[i] as (typeof deliveries)[0],
        ];
      }
      const key = t.deps.config.QSTASH_CURRENT_SIGNING_KEY;
      const deliver = async (d: { path: string; body: string }) => {
        const signature = await qstashSignature({ key, url: `${t.deps.config.PUBLIC_URL}${d.path}`, body: d.body });
        return await call(t.app, "POST", d.path, {
          body: d.body,
          headers: { "content-type": "application/json", "upstash-signature": signature },
        });
      };
      const responses = await Promise.all(deliveries.map(deliver));
      // Lock conflicts are retried inside the handler: every delivery succeeds the first time.
      expect(responses.map((r) => r.status).filter((s) => s !== 200)).toEqual([]);
      // Anything the drains did not reach yet (claimed under another delivery's lease) is closed
      // by the closes above or by the writer's own close messages, delivered now (twice each).
      const closes = tapped().filter((m) => m.url.endsWith(ORDER_CLOSE_PATH));
      for (const m of closes)
        for (let i = 0; i < 2; i++)
          expect((await deliver({ path: ORDER_CLOSE_PATH, body: JSON.stringify(m.body) })).status).toBe(200);
      const m = await mysqlCounts(t, voucherId);
      expect(m.orders).toBe(stock);
      expect(m.active).toBe(0);
      expect(m.stock).toBe(stock);
      const rows = (
        await t.deps.db.execute(
          "SELECT COUNT(DISTINCT id) AS n, COUNT(DISTINCT user_id) AS u FROM tb_voucher_order WHERE voucher_id = ?",
          [voucherId],
        )
      ).rows[0] as { n: string; u: string };
      expect(Number(rows.n)).toBe(stock);
      expect(Number(rows.u)).toBe(stock);
      expect(Number(await t.deps.redis.get(keys.seckill.stock(shopId, voucherId, 0)))).toBe(stock);
      expect(await t.deps.redis.scard(keys.seckill.released(shopId, voucherId))).toBe(stock);
      expect(await t.deps.redis.scard(keys.seckill.buyers(shopId, voucherId))).toBe(0);
      expect(await t.deps.redis.hlen(keys.seckill.outbox(shopId))).toBe(0);
      expect(t.deps.isolate.orderGroups.lockConflicts.exhausted).toBe(0);
    } finally {
      await t.settle();
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
      const outbox = (await t.deps.redis.hgetall<Record<string, Reservation>>(keys.seckill.outbox(shopId))) ?? {};
      reservations.push(...Object.values(outbox).sort((a, b) => a.userId - b.userId));
      expect(reservations.length).toBe(4);
      const { writeOrder } = await import("../../src/services/seckill/orders.ts");
      for (const r of reservations.slice(0, 3)) await writeOrder(t.deps, r);
      // One of the written orders is paid: it must survive.
      await t.deps.db.execute("UPDATE tb_voucher_order SET status = 2 WHERE id = ?", [
        BigInt(reservations[0]?.orderId as string),
      ]);
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
      const report = await call<{
        vouchers: { voucherId: number; ok: boolean; drift: string[]; repaired: string[]; redisStock: number }[];
      }>(t.app, "GET", "/admin/reconcile", {
        token: `Bearer ${t.deps.config.ADMIN_TOKEN}`,
      });
      const mine = report.body.data?.vouchers.find((v) => v.voucherId === voucherId);
      expect(mine?.ok).toBe(false);
      expect(mine?.repaired.join(" ")).toContain("re-added 1 buyer");
      expect(mine?.redisStock).toBe(15);
      expect(Number(await t.deps.redis.get(keys.seckill.stock(shopId, voucherId, 0)))).toBe(15);
      // The next pass finds nothing to repair.
      await cronPass(t);
      const again = await call<{ vouchers: { voucherId: number; ok: boolean }[] }>(t.app, "GET", "/admin/reconcile", {
        token: `Bearer ${t.deps.config.ADMIN_TOKEN}`,
      });
      expect(again.body.data?.vouchers.find((v) => v.voucherId === voucherId)?.ok).toBe(true);
      expect((await call(t.app, "GET", "/admin/reconcile")).status).toBe(401);
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 60_000);
});

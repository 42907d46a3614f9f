/**
 * The order pipeline over a sharded seckill voucher (issue 18 item 4): every stage after the
 * reservation knows the buyer's home shard. Drains are announced and delivered per (shop, shard),
 * the writer claims and acknowledges in that shard's outbox only, closes give units back to the
 * buyer's home shard, the order index names the shard, and the sweep re-announces per shard. An
 * unsharded voucher's messages keep their shapes exactly. Shards are real databases
 * (tests/support/shards.ts: a redis-server and an Upstash-REST stand-in each).
 */
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import type { Deps } from "../../src/deps.ts";
import {
  CloseBody,
  closeMessage,
  DrainBody,
  drainMessage,
  drainNowMessage,
  ORDER_CLOSE_PATH,
  ORDER_DRAIN_PATH,
} from "../../src/queue/messages.ts";
import { keys } from "../../src/redis/keys.ts";
import { closeExpired } from "../../src/services/seckill/close.ts";
import { loadSeckillConfig, type SeckillConfig } from "../../src/services/seckill/config.ts";
import { closeOrder, findReservation } from "../../src/services/seckill/orders.ts";
import {
  indexHourOf,
  indexValueOf,
  outboxesOf,
  parseIndexValue,
  parseReservation,
} from "../../src/services/seckill/outbox.ts";
import { settleWebhook } from "../../src/services/seckill/payments.ts";
import { sweepOutbox } from "../../src/services/seckill/pipeline.ts";
import { reserve } from "../../src/services/seckill/reserve.ts";
import { homeShard } from "../../src/services/seckill/shards.ts";
import type { Reservation } from "../../src/services/seckill/types.ts";
import { drainShop } from "../../src/services/seckill/writer.ts";
import { Faults } from "../support/faults.ts";
import { call } from "../support/http.ts";
import { qstashSignature } from "../support/qstash-sign.ts";
import { createSeckill as createSeckillVoucher, mysqlCounts, sessionsFor, userIds } from "../support/seckill.ts";
import { getShardStack, type ShardStack } from "../support/shards.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";
import { retireVouchers } from "../support/seckill.ts";

const N = 4;
const ENV = {
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: "0",
  SOLD_OUT_MEMO_MS: "0",
};
const IP = "10.0.18.4";

type Message = { url: string; body: unknown; deduplicationId?: string; notBefore?: number; delay?: number };

let shards: ShardStack;
beforeEach(async () => {
  shards = await getShardStack(N);
});

/** Vouchers this file created, and an app to retire them with. */
const created: number[] = [];
let cleaner: TestApp | undefined;
async function createSeckill(t: TestApp, opts: Parameters<typeof createSeckillVoucher>[1]) {
  const v = await createSeckillVoucher(t, opts);
  created.push(v.voucherId);
  cleaner ??= t;
  return v;
}

// The jobs of later test files in this process run on apps without these shards: this file's
// sharded vouchers leave the jobs' registry (ended long ago) and their unpaid orders are closed.
afterAll(async () => {
  if (cleaner) await retireVouchers(cleaner.deps, created);
});

/** An app (sharded unless `unsharded`) whose QStash publishes are recorded and dropped: the test delivers what it wants. */
async function tappedApp(opts: { unsharded?: boolean; env?: Record<string, string> } = {}) {
  const faults = new Faults().on("queue.batchJSON", "tap");
  const t = await createTestApp(
    { ...ENV, ...(opts.unsharded ? {} : shards.env), ...opts.env },
    { wrap: (deps) => faults.wrap(deps) },
  );
  const messages = () => (faults.tapped.get("queue.batchJSON") ?? []).flatMap((args) => args[0] as Message[]);
  return { t, faults, messages };
}

async function cfgOf(t: TestApp, voucherId: number): Promise<SeckillConfig> {
  const cfg = await loadSeckillConfig(t.deps, voucherId);
  if (!cfg) throw new Error(`voucher ${voucherId} not found`);
  return cfg;
}

/** Users whose home shard of `n` is `shard`. */
function usersHomedAt(shard: number, n: number, count: number): number[] {
  const out: number[] = [];
  while (out.length < count)
    for (const u of userIds(50)) if (homeShard(u, n) === shard && out.length < count) out.push(u);
  return out;
}

async function reserveAll(t: TestApp, voucherId: number, users: readonly number[]): Promise<string[]> {
  const res = await Promise.all(users.map((userId) => reserve(t.deps, { voucherId, userId, ip: IP })));
  const ids = res.map((r) => (r.ok ? r.orderId : ""));
  expect(ids.every((id) => id !== "")).toBe(true);
  await t.settle();
  return ids;
}

/** The shop's outbox entries in one database (a shard's, or the main one's). */
async function outboxIn(redis: Deps["redis"], shopId: number): Promise<Reservation[]> {
  return Object.values((await redis.hgetall<Record<string, unknown>>(keys.seckill.outbox(shopId))) ?? {}).map(
    parseReservation,
  );
}

/** Stock left and buyers of the voucher in each shard (read straight from the shard databases). */
async function perShard(t: TestApp, cfg: SeckillConfig): Promise<{ stock: number; buyers: number }[]> {
  return await Promise.all(
    t.deps.seckillShards.slice(0, N).map(async (r) => {
      const stocks = await Promise.all(
        Array.from({ length: cfg.buckets }, (_, b) =>
          r.get<number | string>(keys.seckill.stock(cfg.shopId, cfg.voucherId, b)),
        ),
      );
      return {
        stock: stocks.reduce<number>((a, s) => a + Number(s ?? 0), 0),
        buyers: await r.scard(keys.seckill.buyers(cfg.shopId, cfg.voucherId)),
      };
    }),
  );
}

/** Delivers a drain body to the drain route, signed as QStash signs it. */
async function deliverDrain(t: TestApp, body: unknown) {
  const raw = JSON.stringify(body);
  const signature = await qstashSignature({
    key: t.deps.config.QSTASH_CURRENT_SIGNING_KEY,
    url: `${t.deps.config.PUBLIC_URL}${ORDER_DRAIN_PATH}`,
    body: raw,
  });
  const res = await call<{ created: number; existed: number }>(t.app, "POST", ORDER_DRAIN_PATH, {
    body: raw,
    headers: { "content-type": "application/json", "upstash-signature": signature },
  });
  expect(res.status).toBe(200);
  return res.body.data as { created: number; existed: number };
}

const drainsOf = (ms: readonly Message[], shopId: number) =>
  ms.filter((m) => m.url.endsWith(ORDER_DRAIN_PATH) && (m.body as { shopId: number }).shopId === shopId);
const closesOf = (ms: readonly Message[], shopId: number) =>
  ms.filter((m) => m.url.endsWith(ORDER_CLOSE_PATH) && (m.body as { shopId: number }).shopId === shopId);

describe("order pipeline over seckill shards", () => {
  test("buyers homed in every shard: drains are announced per (shop, shard) with the shard, and the drain route writes each reservation to MySQL exactly once, acknowledged in its own shard's outbox only", async () => {
    const { t, messages } = await tappedApp();
    const { shopId, voucherId } = await createSeckill(t, { stock: 40 });
    const cfg = await cfgOf(t, voucherId);
    expect(cfg.shards).toBe(N);
    const homed = Array.from({ length: N }, (_, s) => usersHomedAt(s, N, 3));
    const ids = await reserveAll(t, voucherId, homed.flat());

    // Each reservation is in its buyer's home shard's outbox, carrying the shard; none in the main database.
    const outboxes = await Promise.all(t.deps.seckillShards.slice(0, N).map((r) => outboxIn(r, shopId)));
    for (let s = 0; s < N; s++) {
      expect(outboxes[s]?.map((r) => r.userId).sort()).toEqual([...(homed[s] as number[])].sort());
      expect(outboxes[s]?.every((r) => r.shard === s)).toBe(true);
    }
    expect(await t.deps.redis.hlen(keys.seckill.outbox(shopId))).toBe(0);

    // The order index (main database) names shop and shard.
    for (const [i, id] of ids.entries()) {
      const shard = Math.floor(i / 3);
      expect(String(await t.deps.redis.hget(keys.seckill.orderIndex(indexHourOf(id)), id))).toBe(`${shopId}:${shard}`);
    }

    // Announced per shard: every drain names its shard, and each shard's deduplication id is its own.
    const drains = drainsOf(messages(), shopId);
    const announced = new Set(drains.map((d) => (d.body as { shard?: number }).shard));
    expect([...announced].sort()).toEqual([0, 1, 2, 3]);
    for (const d of drains) {
      const shard = (d.body as { shard: number }).shard;
      expect(d.body).toEqual({ shopId, shard });
      expect(d.deduplicationId).toMatch(new RegExp(`^drain-s${shopId}-sh${shard}-w\\d+$`));
      expect(DrainBody.safeParse(d.body).success).toBe(true);
    }
    expect(new Set(drains.map((d) => d.deduplicationId)).size).toBe(drains.length);

    // Shard 0's drain, delivered twice: its 3 orders once, only shard 0's outbox emptied — and
    // no command reached another shard's database.
    const before = messages().length;
    await t.settle();
    const commands = () => shards.stats().map((st) => st.commands);
    const c0 = commands();
    expect(await deliverDrain(t, { shopId, shard: 0 })).toMatchObject({ created: 3 });
    expect(await deliverDrain(t, { shopId, shard: 0 })).toMatchObject({ created: 0 });
    await t.settle();
    const c1 = commands();
    expect(c1.map((c, i) => c - (c0[i] ?? 0)).slice(1)).toEqual([0, 0, 0]);
    expect((c1[0] ?? 0) - (c0[0] ?? 0)).toBeGreaterThanOrEqual(3);
    expect(await mysqlCounts(t, voucherId)).toEqual({ orders: 3, active: 3, stock: 37 });
    const sizes = async () =>
      await Promise.all(t.deps.seckillShards.slice(0, N).map((r) => r.hlen(keys.seckill.outbox(shopId))));
    expect(await sizes()).toEqual([0, 3, 3, 3]);
    expect(await t.deps.seckillShards[0]?.zcard(keys.seckill.outboxDue(shopId))).toBe(0);
    // What the writer published names the same shard: the group's close and the next window's drain.
    const published = messages().slice(before);
    const closes = closesOf(published, shopId);
    expect(closes.length).toBe(1);
    expect(closes[0]?.body).toEqual({ shopId, orderIds: expect.any(Array), shard: 0 });
    expect([...((closes[0]?.body ?? { orderIds: [] }) as { orderIds: string[] }).orderIds].sort()).toEqual(
      ids.slice(0, 3).sort(),
    );
    expect(CloseBody.safeParse(closes[0]?.body).success).toBe(true);
    for (const d of drainsOf(published, shopId)) expect(d.body).toEqual({ shopId, shard: 0 });

    // The other shards, each by its own drain; redelivery of all of them writes nothing more.
    for (const shard of [1, 2, 3]) expect(await deliverDrain(t, { shopId, shard })).toMatchObject({ created: 3 });
    for (const shard of [0, 1, 2, 3]) expect(await deliverDrain(t, { shopId, shard })).toMatchObject({ created: 0 });
    expect(await sizes()).toEqual([0, 0, 0, 0]);
    const rows = (
      await t.deps.db.execute(
        "SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS d FROM tb_voucher_order WHERE voucher_id = ?",
        [voucherId],
      )
    ).rows[0] as { n: string; d: string };
    expect([Number(rows.n), Number(rows.d)]).toEqual([12, 12]);
    expect(await mysqlCounts(t, voucherId)).toEqual({ orders: 12, active: 12, stock: 28 });
    // A drain of the main database's outbox for this shop finds nothing (the voucher is not there).
    expect(await deliverDrain(t, { shopId })).toMatchObject({ created: 0 });
    await t.settle();
  });

  test("a drain naming a shard the schema or the deployment does not have is refused (400 for a malformed one; an unconfigured one fails and is retried)", async () => {
    const { t } = await tappedApp();
    const { shopId } = await createSeckill(t, { stock: 4 });
    for (const shard of [-1, 1.5, 64, "1"]) expect(DrainBody.safeParse({ shopId, shard }).success).toBe(false);
    const raw = JSON.stringify({ shopId, shard: 64 });
    const signature = await qstashSignature({
      key: t.deps.config.QSTASH_CURRENT_SIGNING_KEY,
      url: `${t.deps.config.PUBLIC_URL}${ORDER_DRAIN_PATH}`,
      body: raw,
    });
    expect(
      (
        await call(t.app, "POST", ORDER_DRAIN_PATH, {
          body: raw,
          headers: { "content-type": "application/json", "upstash-signature": signature },
        })
      ).status,
    ).toBe(400);
    // Valid, but this deployment has 4 shards: the delivery fails (QStash retries, then dead-letters).
    await expect(drainShop(t.deps, shopId, { shard: 9 })).rejects.toThrow(/seckill shard 9 is not configured/);
  });

  test("a drain or close naming a shard this deployment lacks answers 503 UNAVAILABLE in the envelope, naming the shard, with Retry-After (as /admin/seckill does)", async () => {
    const { t } = await tappedApp();
    const { shopId } = await createSeckill(t, { stock: 4 });
    const deliver = async (path: string, body: unknown) => {
      const raw = JSON.stringify(body);
      const signature = await qstashSignature({
        key: t.deps.config.QSTASH_CURRENT_SIGNING_KEY,
        url: `${t.deps.config.PUBLIC_URL}${path}`,
        body: raw,
      });
      return await call(t.app, "POST", path, {
        body: raw,
        headers: { "content-type": "application/json", "upstash-signature": signature },
      });
    };
    // Valid bodies (the schema allows shard 9), but this deployment has 4 shards.
    for (const [path, body] of [
      [ORDER_DRAIN_PATH, { shopId, shard: 9 }],
      [ORDER_CLOSE_PATH, { shopId, shard: 9, orderIds: ["123456789"] }],
    ] as const) {
      const res = await deliver(path, body);
      expect([path, res.status, res.body.code]).toEqual([path, 503, "UNAVAILABLE"]);
      expect(res.body.success).toBe(false);
      expect(res.body.errorMsg).toContain("seckill shard 9 is not configured");
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
    }
  });

  test("closing an unpaid order gives its unit back to its buyer's home shard only (closeOrder, and closeExpired for a written one and one never written)", async () => {
    const { t } = await tappedApp();
    const { shopId, voucherId } = await createSeckill(t, { stock: 12 });
    const cfg = await cfgOf(t, voucherId);
    const [u1] = usersHomedAt(1, N, 1) as [number];
    const [u2] = usersHomedAt(2, N, 1) as [number];
    const [u3] = usersHomedAt(3, N, 1) as [number];
    const [o1, o2, o3] = await reserveAll(t, voucherId, [u1, u2, u3]);
    // Shards 1 and 2 written to MySQL; shard 3's reservation left in its outbox.
    await drainShop(t.deps, shopId, { shard: 1 });
    await drainShop(t.deps, shopId, { shard: 2 });
    expect(await mysqlCounts(t, voucherId)).toEqual({ orders: 2, active: 2, stock: 10 });
    const start = await perShard(t, cfg);
    expect(start.map((s) => s.buyers)).toEqual([0, 1, 1, 1]);

    // closeOrder of shard 1's order: stock there +1, buyers there −1, nowhere else.
    expect(await closeOrder(t.deps, o1 as string)).toBe("cancelled");
    const afterOne = await perShard(t, cfg);
    expect(afterOne).toEqual(start.map((s, i) => (i === 1 ? { stock: s.stock + 1, buyers: s.buyers - 1 } : s)));
    expect(await mysqlCounts(t, voucherId)).toEqual({ orders: 2, active: 1, stock: 11 });
    // A repeat releases nothing twice.
    expect(await closeOrder(t.deps, o1 as string)).toBe("already-cancelled");
    expect(await perShard(t, cfg)).toEqual(afterOne);

    // A day later close-expired closes shard 2's written order and shard 3's outbox-only reservation.
    const res = await closeExpired(t.deps, Date.now() + 86_400_000 + 60_000);
    expect(res.closed).toBeGreaterThanOrEqual(1);
    expect(res.closedBeforeWrite).toBeGreaterThanOrEqual(1);
    const end = await perShard(t, cfg);
    expect(end).toEqual(
      afterOne.map((s, i) => (i === 2 || i === 3 ? { stock: s.stock + 1, buyers: s.buyers - 1 } : s)),
    );
    expect(end.map((s) => s.stock).reduce((a, b) => a + b, 0)).toBe(12);
    const status = async (id: string) =>
      Number(
        (
          (await t.deps.db.execute("SELECT status FROM tb_voucher_order WHERE id = ?", [BigInt(id)])).rows[0] as {
            status: number;
          }
        ).status,
      );
    expect([await status(o2 as string), await status(o3 as string)]).toEqual([4, 4]);
    // Shard 3's entry left its own outbox; MySQL stock counts only the written orders' units back.
    expect(await t.deps.seckillShards[3]?.hlen(keys.seckill.outbox(shopId))).toBe(0);
    expect(await mysqlCounts(t, voucherId)).toEqual({ orders: 3, active: 0, stock: 12 });
    await t.settle();
  });

  test("a queued sharded order is found by id (findReservation from another isolate, and GET /api/voucher-order/{id}) in its shard's outbox", async () => {
    const { t } = await tappedApp();
    const { shopId, voucherId } = await createSeckill(t, { stock: 8 });
    const [user] = usersHomedAt(2, N, 1) as [number];
    const [orderId] = (await reserveAll(t, voucherId, [user])) as [string];
    // Another isolate: nothing pending in its memory, so the index (main database) is read.
    const other = await createTestApp({ ...ENV, ...shards.env });
    const r = await findReservation(other.deps, orderId);
    expect(r).toMatchObject({ orderId, userId: user, voucherId, shopId, shard: 2 });
    const [token] = (await sessionsFor(other, [user])) as [string];
    const res = await call<{ id: string; status: string; userId: number }>(
      other.app,
      "GET",
      `/api/voucher-order/${orderId}`,
      { token },
    );
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ id: orderId, status: "queued", userId: user, voucherId });
    // Someone else asking gets nothing.
    const [stranger] = (await sessionsFor(other, userIds(1))) as [string];
    expect((await call(other.app, "GET", `/api/voucher-order/${orderId}`, { token: stranger })).body.success).toBe(
      false,
    );
    // Before its index write, the reserving isolate finds it from memory (the shard included).
    const [late] = usersHomedAt(1, N, 1) as [number];
    const lateRes = await reserve(t.deps, { voucherId, userId: late, ip: IP });
    if (!lateRes.ok) throw new Error("reserve failed");
    expect(t.deps.isolate.orderGroups.pendingShopOf(lateRes.orderId)).toEqual({ shopId, shard: 1 });
    expect(await findReservation(t.deps, lateRes.orderId)).toMatchObject({ orderId: lateRes.orderId, shard: 1 });
    await t.settle();
    await other.settle();
  });

  test("the sweep re-announces an overdue entry of shard 2 with shard 2 (and nothing for this shop's other outboxes), and its delivery writes it", async () => {
    const { t, messages } = await tappedApp();
    const { shopId, voucherId } = await createSeckill(t, { stock: 8 });
    const [user] = usersHomedAt(2, N, 1) as [number];
    const [orderId] = (await reserveAll(t, voucherId, [user])) as [string];
    const before = messages().length;
    const now = Date.now() + t.deps.config.OUTBOX_REPUBLISH_AFTER_SECONDS * 1000 + 5_000;
    const res = await sweepOutbox(t.deps, now);
    expect(res.overdue).toBeGreaterThanOrEqual(1);
    const drains = drainsOf(messages().slice(before), shopId);
    expect(drains.length).toBe(1);
    expect(drains[0]?.body).toEqual({ shopId, shard: 2 });
    expect(drains[0]?.deduplicationId).toBe(`drain-s${shopId}-sh2-sweep-${Math.floor(now / 60_000)}`);
    expect(drains[0]?.notBefore).toBeUndefined();
    expect(await deliverDrain(t, drains[0]?.body)).toMatchObject({ created: 1 });
    const rows = (await t.deps.db.execute("SELECT user_id FROM tb_voucher_order WHERE id = ?", [BigInt(orderId)]))
      .rows as { user_id: number | string }[];
    expect(rows.map((r) => Number(r.user_id))).toEqual([user]);
    await t.settle();
  });

  test("a sharded reservation paid before the writer got to it: the row is created as paid from its shard's outbox and acknowledged there; a close after payment releases nothing", async () => {
    const { t } = await tappedApp();
    const { shopId, voucherId } = await createSeckill(t, { stock: 8 });
    const cfg = await cfgOf(t, voucherId);
    const [user] = usersHomedAt(3, N, 1) as [number];
    const [orderId] = (await reserveAll(t, voucherId, [user])) as [string];
    const r = (await findReservation(t.deps, orderId)) as Reservation;
    expect(r.shard).toBe(3);
    const paymentId = `${BigInt(orderId) + 3n}`;
    await t.deps.db.execute("INSERT INTO tb_payment (id, order_id, user_id, amount, status) VALUES (?, ?, ?, ?, 1)", [
      BigInt(paymentId),
      BigInt(orderId),
      user,
      r.amount,
    ]);
    expect(await settleWebhook(t.deps, { type: "payment.succeeded", paymentId, providerRef: "x" })).toBe(
      "paid-from-reservation",
    );
    expect(await t.deps.seckillShards[3]?.hlen(keys.seckill.outbox(shopId))).toBe(0);
    expect(await mysqlCounts(t, voucherId)).toEqual({ orders: 1, active: 1, stock: 7 });
    // The late drain of shard 3 finds nothing; a close finds it paid; the buyer still holds the unit.
    expect(await drainShop(t.deps, shopId, { shard: 3 })).toMatchObject({ created: 0, existed: 0 });
    expect(await closeOrder(t.deps, orderId)).toBe("not-unpaid");
    expect((await perShard(t, cfg))[3]?.buyers).toBe(1);
    await t.settle();
  });

  test("an unsharded voucher's pipeline sends exactly the messages it sent before shards: no `shard` in any body, the same deduplication ids, the shop id as index value", async () => {
    const { t, messages } = await tappedApp({ unsharded: true });
    expect(t.deps.seckillShards).toEqual([]);
    const { shopId, voucherId } = await createSeckill(t, { stock: 10 });
    const cfg = await cfgOf(t, voucherId);
    expect(cfg.shards).toBeUndefined();
    const ids = await reserveAll(t, voucherId, userIds(3));
    const drains = drainsOf(messages(), shopId);
    expect(drains.length).toBeGreaterThanOrEqual(1);
    for (const d of drains) {
      expect(d.body).toEqual({ shopId });
      expect(d.deduplicationId).toMatch(new RegExp(`^drain-s${shopId}-w\\d+$`));
    }
    const entries = await outboxIn(t.deps.redis, shopId);
    expect(entries.length).toBe(3);
    for (const e of entries) expect("shard" in e).toBe(false);
    for (const id of ids)
      expect(String(await t.deps.redis.hget(keys.seckill.orderIndex(indexHourOf(id)), id))).toBe(String(shopId));
    // The sweep's drain.
    const b0 = messages().length;
    const now = Date.now() + t.deps.config.OUTBOX_REPUBLISH_AFTER_SECONDS * 1000 + 5_000;
    await sweepOutbox(t.deps, now);
    const swept = drainsOf(messages().slice(b0), shopId);
    expect(swept.map((m) => [m.body, m.deduplicationId])).toEqual([
      [{ shopId }, `drain-s${shopId}-sweep-${Math.floor(now / 60_000)}`],
    ]);
    // The writer's close and next-window drain.
    const b1 = messages().length;
    expect(await drainShop(t.deps, shopId)).toMatchObject({ created: 3 });
    const published = messages().slice(b1);
    expect(closesOf(published, shopId).map((m) => m.body)).toEqual([{ shopId, orderIds: expect.any(Array) }]);
    expect(Object.keys(closesOf(published, shopId)[0]?.body as object).sort()).toEqual(["orderIds", "shopId"]);
    for (const d of drainsOf(published, shopId)) expect(d.body).toEqual({ shopId });
    // Close releases in the main database, as before.
    expect(await closeOrder(t.deps, ids[0] as string)).toBe("cancelled");
    expect(await t.deps.redis.scard(keys.seckill.buyers(shopId, voucherId))).toBe(2);
    await t.settle();
  });

  test("message builders: no shard → the pre-shard shape; a shard → in the body and in the deduplication id", () => {
    const deps = {
      config: { PUBLIC_URL: "http://app.test", ORDER_MESSAGE_RETRIES: 3, ORDER_PAY_TIMEOUT_SECONDS: 900 },
    } as unknown as Pick<Deps, "config">;
    expect(drainMessage(deps, 7, 100)).toEqual({
      url: `http://app.test${ORDER_DRAIN_PATH}`,
      body: { shopId: 7 },
      deduplicationId: "drain-s7-w100",
      notBefore: 101,
      retries: 3,
    });
    expect(drainMessage(deps, 7, 100, 2)).toEqual({
      url: `http://app.test${ORDER_DRAIN_PATH}`,
      body: { shopId: 7, shard: 2 },
      deduplicationId: "drain-s7-sh2-w100",
      notBefore: 101,
      retries: 3,
    });
    expect(drainMessage(deps, 7, 100, 0).deduplicationId).not.toBe(drainMessage(deps, 7, 100, 1).deduplicationId);
    expect(drainNowMessage(deps, 7, "sweep-5")).toEqual({
      url: `http://app.test${ORDER_DRAIN_PATH}`,
      body: { shopId: 7 },
      deduplicationId: "drain-s7-sweep-5",
      retries: 3,
    });
    expect(drainNowMessage(deps, 7, "sweep-5", 3).deduplicationId).toBe("drain-s7-sh3-sweep-5");
    expect(closeMessage(deps, 7, ["1"]).body).toEqual({ shopId: 7, orderIds: ["1"] });
    expect(closeMessage(deps, 7, ["1"], 3).body).toEqual({ shopId: 7, orderIds: ["1"], shard: 3 });
    expect(CloseBody.parse({ shopId: 7, orderIds: ["1"], shard: 3 })).toEqual({ shopId: 7, orderIds: ["1"], shard: 3 });
    expect(CloseBody.parse({ orderId: "1" })).toEqual({ shopId: undefined, orderIds: ["1"] });
  });

  test("order index values and outboxes: both forms parse, junk does not; a shop's outboxes are its main one (unsharded vouchers) and one per shard its sharded vouchers use", () => {
    expect(indexValueOf({ shopId: 5 })).toBe(5);
    expect(indexValueOf({ shopId: 5, shard: 0 })).toBe("5:0");
    expect(parseIndexValue(5)).toEqual({ shopId: 5 });
    expect(parseIndexValue("5")).toEqual({ shopId: 5 });
    expect(parseIndexValue("5:3")).toEqual({ shopId: 5, shard: 3 });
    for (const junk of [null, undefined, "", "0", "-1", "5:", "5:-1", "5:1:2", "x:1", "5:1.5"])
      expect(parseIndexValue(junk)).toBeNull();
    expect(
      outboxesOf([
        { shopId: 1 },
        { shopId: 2, shards: 2 },
        { shopId: 1, shards: 3 },
        { shopId: 3 },
        { shopId: 2, shards: 1 },
      ]),
    ).toEqual([
      { shopId: 1 },
      { shopId: 1, shard: 0 },
      { shopId: 1, shard: 1 },
      { shopId: 1, shard: 2 },
      { shopId: 2, shard: 0 },
      { shopId: 2, shard: 1 },
      { shopId: 3 },
    ]);
  });
});

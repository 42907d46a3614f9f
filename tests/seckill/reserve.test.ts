import { describe, expect, test } from "bun:test";
import { keys } from "../../src/redis/keys.ts";
import { reserve } from "../../src/services/seckill/reserve.ts";
import { call } from "../support/http.ts";
import { createSeckill, mysqlCounts, sessionsFor, userIds } from "../support/seckill.ts";
import { eventually, serveTestApp, type ServedApp } from "../support/stack.ts";

const ENV = {
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: "0",
  SOLD_OUT_MEMO_MS: "0",
};

async function redisStock(t: ServedApp, shopId: number, voucherId: number, buckets: number): Promise<number> {
  const vals = await t.deps.redis.mget<(string | number | null)[]>(
    ...Array.from({ length: buckets }, (_, i) => keys.seckill.stock(shopId, voucherId, i)),
  );
  return vals.reduce<number>((s, v) => s + Number(v ?? 0), 0);
}

describe("seckill reservation", () => {
  for (const [stock, buckets] of [
    [1, 1],
    [100, 1],
    [100, 4],
  ] as const) {
    test(`stock ${stock}, ${buckets} bucket(s), ${stock * 10} concurrent buyers through the route: no oversell, no undersell, MySQL agrees`, async () => {
      const t = await serveTestApp(ENV);
      try {
        const { shopId, voucherId } = await createSeckill(t, { stock, buckets });
        const tokens = await sessionsFor(t, userIds(stock * 10));
        const results = await Promise.all(
          tokens.map((token) => call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token })),
        );
        const wins = results.filter((r) => r.body.success);
        expect(wins.length).toBe(stock);
        expect(results.filter((r) => !r.body.success).every((r) => r.body.code === "SOLD_OUT")).toBe(true);
        expect(new Set(wins.map((r) => r.body.data)).size).toBe(stock);
        expect(await redisStock(t, shopId, voucherId, buckets)).toBe(0);
        await eventually("orders written", async () => (await mysqlCounts(t, voucherId)).orders === stock);
        await t.settle();
        const m = await mysqlCounts(t, voucherId);
        expect(m).toEqual({ orders: stock, active: stock, stock: 0 });
        expect(await t.deps.redis.hlen(keys.seckill.outbox(shopId))).toBe(0);
      } finally {
        await t.settle();
        await t.stop();
      }
    }, 60_000);
  }

  test("one order per user: 50 users × 5 concurrent requests make 50 orders", async () => {
    const t = await serveTestApp(ENV);
    try {
      const { voucherId } = await createSeckill(t, { stock: 1000 });
      const tokens = await sessionsFor(t, userIds(50));
      const results = await Promise.all(
        tokens.flatMap((token) =>
          Array.from({ length: 5 }, () =>
            call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token }),
          ),
        ),
      );
      expect(results.filter((r) => r.body.success).length).toBe(50);
      expect(results.filter((r) => r.body.code === "DUPLICATE_ORDER").length).toBe(200);
      await eventually("orders written", async () => (await mysqlCounts(t, voucherId)).orders === 50);
      const perUser = (
        await t.deps.db.execute(
          "SELECT MAX(n) AS m FROM (SELECT COUNT(*) AS n FROM tb_voucher_order WHERE voucher_id = ? GROUP BY user_id) x",
          [voucherId],
        )
      ).rows[0] as { m: string };
      expect(Number(perUser.m)).toBe(1);
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 60_000);

  test("a buyer never sees sold out while another bucket still has stock", async () => {
    const t = await serveTestApp(ENV);
    try {
      const { voucherId } = await createSeckill(t, { stock: 8, buckets: 4 });
      // Eight buyers whose home bucket is the same (ids ≡ 0 mod 4): all must be served.
      const ids = userIds(40)
        .filter((id) => id % 4 === 0)
        .slice(0, 8);
      const results = await Promise.all(ids.map((userId) => reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })));
      expect(results.every((r) => r.ok)).toBe(true);
      const more = await reserve(t.deps, { voucherId, userId: userIds(1)[0] as number, ip: "10.0.0.1" });
      expect(more).toMatchObject({ ok: false, reason: "SOLD_OUT" });
    } finally {
      await t.settle();
      await t.stop();
    }
  });

  test("order ids are unique, time-ordered 64-bit decimal strings", async () => {
    const t = await serveTestApp(ENV);
    try {
      const { voucherId } = await createSeckill(t, { stock: 200 });
      const res = [];
      for (const userId of userIds(100)) res.push(await reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" }));
      const ids = res.map((r) => (r.ok ? r.orderId : "")).filter(Boolean);
      expect(ids.length).toBe(100);
      expect(ids.every((id) => /^\d{16,19}$/.test(id))).toBe(true);
      const big = ids.map((id) => BigInt(id));
      expect(big.some((b) => b > BigInt(Number.MAX_SAFE_INTEGER))).toBe(true);
      for (let i = 1; i < big.length; i++) expect((big[i] as bigint) > (big[i - 1] as bigint)).toBe(true);
    } finally {
      await t.settle();
      await t.stop();
    }
  });
});

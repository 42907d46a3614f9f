import { describe, expect, test } from "bun:test";
import { keys } from "../../src/redis/keys.ts";
import { reserve } from "../../src/services/seckill/reserve.ts";
import { createSeckill, mysqlCounts, userIds } from "../support/seckill.ts";
import { eventually, serveTestApp } from "../support/stack.ts";

const ENV = {
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: "0",
  SOLD_OUT_MEMO_MS: "0",
};

describe("seckill at scale", () => {
  for (const buckets of [1, 8]) {
    test(`stock 10,000 with ${buckets} bucket(s) and 100,000 concurrent buyers: exactly 10,000 orders end up in MySQL`, async () => {
      const t = await serveTestApp(ENV);
      try {
        const stock = 10_000;
        const { shopId, voucherId } = await createSeckill(t, { stock, buckets });
        const buyers = userIds(stock * 10);
        let wins = 0;
        let soldOut = 0;
        // 100,000 reservations with 2,000 in flight at a time (the REST client pipelines each burst).
        const inFlight = 2000;
        for (let i = 0; i < buyers.length; i += inFlight) {
          const res = await Promise.all(
            buyers.slice(i, i + inFlight).map((userId) => reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })),
          );
          for (const r of res) {
            if (r.ok) wins++;
            else if (r.reason === "SOLD_OUT") soldOut++;
          }
        }
        expect(wins).toBe(stock);
        expect(soldOut).toBe(buyers.length - stock);
        const left = await t.deps.redis.mget<(string | null)[]>(
          ...Array.from({ length: buckets }, (_, i) => keys.seckill.stock(shopId, voucherId, i)),
        );
        expect(left.reduce((s, v) => s + Number(v ?? 0), 0)).toBe(0);
        await eventually(
          "all orders written",
          async () => (await mysqlCounts(t, voucherId)).orders === stock,
          120_000,
          250,
        );
        await t.settle();
        expect(await mysqlCounts(t, voucherId)).toEqual({ orders: stock, active: stock, stock: 0 });
      } finally {
        await t.settle();
        await t.stop();
      }
    }, 180_000);
  }
});

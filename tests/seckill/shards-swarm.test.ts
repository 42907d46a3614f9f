/**
 * Issue 18's done-when, over HTTP: a swarm of 3,000 buyers × 2 attempts on a 1,000-unit voucher
 * over 4 seckill shards sells exactly 1,000, one per user; every acknowledged order is in MySQL
 * once; stock is conserved; and `GET /admin/seckill/{id}` shows 4 shards that each sold part of it.
 *
 * The app is a real HTTP server (serveTestApp) with 4 shard databases (tests/support/shards.ts: a
 * redis-server and an Upstash-REST stand-in each) and the stack's QStash stand-in delivering the
 * drains to the app's own drain route, per (shop, shard); the buyers are real sessions sent at
 * `POST /api/voucher-order/seckill/{id}`, each one's two attempts in flight together, at most
 * CONNECTIONS requests at once. The checks are tests/support/sale-checks.ts's, which read every
 * database (main and shards). Also: the sale simulator (`npm run sale`, scripts/sale.ts) runs
 * against the sharded app unchanged and waits for the writer across the shards' outboxes.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { z } from "zod";
import { runSale } from "../../scripts/sale.ts";
import * as S from "../../src/openapi/operator.ts";
import { pollUntil, within } from "../support/child.ts";
import { createShop, createShopType } from "../support/fixtures.ts";
import { limiter } from "../support/runtimes.ts";
import {
  type Attempt,
  buy,
  type Buyer,
  createSaleOverHttp,
  expectEveryOrderOnce,
  expectStockConserved,
  mysqlOrderCount,
  orderFindings,
  outboxSize,
  redisSide,
  stockFindings,
} from "../support/sale-checks.ts";
import { sessionsFor, userIds } from "../support/seckill.ts";
import { getShardStack } from "../support/shards.ts";
import { type ServedApp, serveTestApp } from "../support/stack.ts";
import { retireVouchers } from "../support/seckill.ts";

const SHARDS = 4;
const UNITS = 1_000;
const USERS = 3_000;
const ATTEMPTS_PER_USER = 2;
const CONNECTIONS = 200;
const REQUEST_TIMEOUT_MS = 15_000;
const SWARM_TIMEOUT_MS = 30_000;
const DRAIN_TIMEOUT_MS = 15_000;
/** No limiter in the way (one client address, two attempts each) and no close during the test: every unit taken must become an active order. */
const ENV = { SECKILL_USER_LIMIT: "0", SECKILL_IP_LIMIT: "0", ORDER_PAY_TIMEOUT_SECONDS: "86400" };

let t: ServedApp;
const created: number[] = [];

beforeAll(async () => {
  const shards = await getShardStack(SHARDS);
  shards.setLimits({ commandsPerSecond: null });
  t = await serveTestApp({ ...ENV, ...shards.env });
}, 30_000);

// Later test files of this process run jobs on apps without these shards: this file's vouchers
// leave the jobs' registry (ended long ago) and their unpaid orders are closed.
afterAll(async () => {
  await retireVouchers(t.deps, created);
  await t?.settle();
  await t?.stop();
});

async function admin<T>(
  path: string,
): Promise<{ status: number; body: { success: boolean; data?: T; code?: string } }> {
  const res = await fetch(`${t.url}${path}`, {
    headers: { authorization: `Bearer ${t.deps.config.ADMIN_TOKEN}` },
    signal: AbortSignal.timeout(10_000),
  });
  return { status: res.status, body: (await res.json()) as { success: boolean; data?: T; code?: string } };
}

describe("a sharded flash sale over HTTP", () => {
  test(
    `${USERS} buyers × ${ATTEMPTS_PER_USER} attempts on ${UNITS} units over ${SHARDS} shards: exactly ${UNITS} sold, one per user, every acknowledged order in MySQL once, stock conserved, and GET /admin/seckill/{id} shows ${SHARDS} shards that each sold part of it`,
    async () => {
      const { shopId, voucherId } = await within(
        20_000,
        "creating the sale",
        createSaleOverHttp(t.url, t.deps, { units: UNITS, label: "shards-swarm" }),
      );
      created.push(voucherId);
      const ids = userIds(USERS);
      const tokens = await within(30_000, "signing in the buyers", sessionsFor(t, ids));
      const buyers: Buyer[] = ids.map((userId, i) => ({ userId, token: tokens[i] ?? "" }));

      // The swarm: each buyer's attempts queued next to each other, so they are in flight together.
      const run = limiter(CONNECTIONS);
      const attempts: Attempt[] = [];
      const started = performance.now();
      const crowd = buyers.flatMap((buyer) =>
        Array.from({ length: ATTEMPTS_PER_USER }, () =>
          run(async () => {
            attempts.push({ buyer, outcome: await buy(t.url, voucherId, buyer, { timeoutMs: REQUEST_TIMEOUT_MS }) });
          }),
        ),
      );
      await within(SWARM_TIMEOUT_MS, "the swarm", Promise.all(crowd));
      const saleMs = Math.round(performance.now() - started);
      const afterSale = await redisSide(t.deps, shopId, voucherId);

      // The writer drains through QStash into MySQL, per (shop, shard): every unit taken becomes a row.
      const drainStarted = performance.now();
      await pollUntil(
        "the writer to drain every shard's outbox: one MySQL row per Redis buyer",
        async () => {
          const [outbox, rows, side] = await Promise.all([
            outboxSize(t.deps, shopId),
            mysqlOrderCount(t.deps, voucherId),
            redisSide(t.deps, shopId, voucherId),
          ]);
          return outbox === 0 && rows === side.buyers;
        },
        DRAIN_TIMEOUT_MS,
        100,
      );
      const drainMs = Math.round(performance.now() - drainStarted);

      const count = (k: Attempt["outcome"]["kind"]) => attempts.filter((a) => a.outcome.kind === k).length;
      const codes = new Map<string, number>();
      for (const { outcome: o } of attempts) {
        const key =
          o.kind === "ack"
            ? "ack"
            : o.kind === "rejected"
              ? o.code
              : o.kind === "error"
                ? `${o.status}${o.code ? `:${o.code}` : ""}`
                : "lost";
        codes.set(key, (codes.get(key) ?? 0) + 1);
      }
      const acks = attempts.flatMap((a) =>
        a.outcome.kind === "ack" ? [{ orderId: a.outcome.orderId, userId: a.buyer.userId }] : [],
      );
      const problems = attempts.filter((a) => a.outcome.kind === "error" || a.outcome.kind === "lost");

      // GET /admin/seckill/{id}: the sale as an operator sees it, per shard.
      const view = await admin<unknown>(`/admin/seckill/${voucherId}`);
      expect(view.status).toBe(200);
      const parsed = S.SeckillView.safeParse(view.body.data);
      if (!parsed.success)
        throw new Error(`GET /admin/seckill answer does not fit its documented schema: ${parsed.error.message}`);
      const v = parsed.data;
      console.log(
        `shards swarm: attempts=${attempts.length} acks=${acks.length} saleMs=${saleMs} drainMs=${drainMs} ` +
          `answers=${JSON.stringify(Object.fromEntries(codes))} soldPerShard=${JSON.stringify(v.shards.map((s) => s.buyers))} sharesNow=${JSON.stringify(v.shards.map((s) => s.share))}`,
      );

      expect(attempts.length).toBe(USERS * ATTEMPTS_PER_USER);
      expect({
        acknowledged: acks.length,
        distinctOrderIds: new Set(acks.map((a) => a.orderId)).size,
        distinctBuyers: new Set(acks.map((a) => a.userId)).size,
        errorsOrLost: problems.length,
        first: problems.slice(0, 3).map((a) => JSON.stringify(a.outcome)),
      }).toEqual({ acknowledged: UNITS, distinctOrderIds: UNITS, distinctBuyers: UNITS, errorsOrLost: 0, first: [] });
      // Every other attempt was told SOLD_OUT or DUPLICATE_ORDER (the winner's own second click).
      expect(count("rejected")).toBe(USERS * ATTEMPTS_PER_USER - UNITS);
      expect([...codes.keys()].filter((k) => !["ack", "SOLD_OUT", "DUPLICATE_ORDER"].includes(k))).toEqual([]);
      expect(afterSale).toEqual({ stock: 0, buyers: UNITS });

      expectEveryOrderOnce(await orderFindings(t.deps, voucherId, attempts), UNITS);
      expectStockConserved(await stockFindings(t.deps, shopId, voucherId), UNITS);

      expect({
        shardCount: v.shardCount,
        shards: v.shards.map((s) => s.shard),
        stock: v.stock,
        buyers: v.buyers,
        sold: v.sold,
        unaccounted: v.unaccounted,
      }).toEqual({
        shardCount: SHARDS,
        shards: [0, 1, 2, 3],
        stock: 0,
        buyers: UNITS,
        sold: UNITS,
        unaccounted: 0,
      });
      // Each shard sold part of it, out of its own share (stock moved between them as shards ran dry).
      expect(v.shards.every((s) => s.buyers > 0 && s.buyers < UNITS)).toBe(true);
      expect(v.shards.every((s) => s.stock === 0 && s.share === s.buyers)).toBe(true);
      expect(v.shards.reduce((a, s) => a + s.buyers, 0)).toBe(UNITS);
      expect({
        mysqlStock: v.mysqlStock,
        ordersInMysql: v.ordersInMysql,
        outboxPending: v.outboxPending,
        perShard: v.shards.map((s) => s.outbox.pending),
      }).toEqual({
        mysqlStock: 0,
        ordersInMysql: UNITS,
        outboxPending: 0,
        perShard: [0, 0, 0, 0],
      });

      // The overviews read the shards too.
      const sales =
        await admin<{ voucherId: number; stockLeft: number; shards: number; unreadShards: number; state: string }[]>(
          "/admin/sales",
        );
      expect(sales.body.data?.find((r) => r.voucherId === voucherId)).toMatchObject({
        stockLeft: 0,
        shards: SHARDS,
        unreadShards: 0,
        state: "sold out",
      });
      const pipeline = await admin<{ shops: { shopId: number }[] }>("/admin/orders/pipeline");
      expect(pipeline.body.data?.shops.find((s) => s.shopId === shopId)).toBeUndefined();
    },
    SWARM_TIMEOUT_MS + DRAIN_TIMEOUT_MS + 30_000,
  );

  test("the sale simulator (npm run sale) drives a sharded sale unchanged: it sells the stock and waits for the writer across the shards' outboxes", async () => {
    const shopId = await createShop(t, await createShopType(t));
    const s = await runSale({
      baseUrl: t.url,
      stock: 40,
      buyers: 120,
      concurrency: 20,
      buckets: 1,
      startInS: 0,
      repeatShare: 0.5,
      shopId,
      adminToken: t.deps.config.ADMIN_TOKEN,
      sessionSecret: t.deps.config.SESSION_SECRET,
      redis: t.deps.redis,
      db: t.deps.db,
      drainTimeoutMs: 15_000,
      quiet: true,
    });
    created.push(s.voucherId);
    expect({
      sold: s.sold,
      drained: s.drained,
      ordersInMysql: s.ordersInMysql,
      outboxPending: s.outboxPending,
      other: s.refusals.other,
    }).toEqual({
      sold: 40,
      drained: true,
      ordersInMysql: 40,
      outboxPending: 0,
      other: 0,
    });
    const v = (await admin<z.output<typeof S.SeckillView>>(`/admin/seckill/${s.voucherId}`)).body.data;
    expect({ shardCount: v?.shardCount, buyers: v?.buyers, stock: v?.stock, sold: v?.sold }).toEqual({
      shardCount: SHARDS,
      buyers: 40,
      stock: 0,
      sold: 40,
    });
  }, 45_000);
});

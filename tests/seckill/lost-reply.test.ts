/**
 * A reservation whose reply is lost (issue 15 item 2): the script ran in Redis, the client gave up.
 * The buyer holds a unit and must never be told "failed" without an order id. Redis sits behind
 * the fault proxy in reply-delay mode (forwarded at once, the answer held past REDIS_TIMEOUT_MS),
 * the app and every SDK are the production ones, QStash delivers the drains for real.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Redis } from "@upstash/redis";
import { type FaultProxy, startFaultProxy } from "../../scripts/stack/fault-proxy.ts";
import { keys } from "../../src/redis/keys.ts";
import { luaSources, scriptsFor } from "../../src/redis/scripts.ts";
import { reserveArgs, reserveKeys } from "../../src/services/seckill/reserve.ts";
import { serviceDay } from "../../src/util/time.ts";
import { call } from "../support/http.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { eventually, getStack, type ServedApp, serveTestApp } from "../support/stack.ts";

async function sha1Hex(text: string): Promise<string> {
  const d = await crypto.subtle.digest("SHA-1", new TextEncoder().encode(text));
  return [...new Uint8Array(d)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

let proxy: FaultProxy;
let t: ServedApp;
let direct: Redis;
let reserveSha: string;
let fenceSha: string;

beforeAll(async () => {
  const stack = await getStack();
  proxy = startFaultProxy(stack.env.UPSTASH_REDIS_REST_URL as string);
  direct = new Redis({
    url: stack.env.UPSTASH_REDIS_REST_URL as string,
    token: stack.env.UPSTASH_REDIS_REST_TOKEN as string,
    retry: false,
    enableTelemetry: false,
  });
  // The production deadline path: 300 ms Redis timeout; the breaker must not open over a few timeouts.
  t = await serveTestApp({
    UPSTASH_REDIS_REST_URL: proxy.url,
    REDIS_TIMEOUT_MS: "300",
    BREAKER_MIN_CALLS: "1000",
    SECKILL_USER_LIMIT: "0",
    SECKILL_IP_LIMIT: "0",
    SOLD_OUT_MEMO_MS: "0",
    ORDER_PAY_TIMEOUT_SECONDS: "86400",
  });
  reserveSha = await sha1Hex(luaSources.reserveStock);
  fenceSha = await sha1Hex(luaSources.reserveFence);
  // Loaded, so each reservation is one EVALSHA whose body names the script (what the proxy matches).
  await direct.scriptLoad(luaSources.reserveStock);
  await direct.scriptLoad(luaSources.reserveFence);
});

afterAll(async () => {
  await t?.stop();
  await proxy?.stop();
});

async function orderRows(voucherId: number, userId: number): Promise<string[]> {
  const res = await t.deps.db.execute("SELECT id FROM tb_voucher_order WHERE voucher_id = ? AND user_id = ?", [
    voucherId,
    userId,
  ]);
  return (res.rows as { id: string | number }[]).map((r) => String(r.id));
}

/** A buyer whose session and the voucher's config this isolate already holds (so only the reservation meets the fault). */
async function warmBuyer(): Promise<{ userId: number; token: string }> {
  const [userId] = userIds(1) as [number];
  const [token] = (await sessionsFor(t, [userId])) as [string];
  expect((await call(t.app, "GET", "/api/user/me", { token })).status).toBe(200);
  return { userId, token };
}

describe("a reservation whose reply is lost", () => {
  test("the script ran but its answer came late: the buyer gets the order id, and the order reaches MySQL once", async () => {
    const { voucherId } = await createSeckill(t, { stock: 5 });
    // Warm the voucher config and the id block with one normal purchase.
    const first = await warmBuyer();
    expect(
      (await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: first.token })).body
        .success,
    ).toBe(true);

    const buyer = await warmBuyer();
    const settledBefore = t.deps.isolate.seckillLostReplies.reserved;
    proxy.set({ kind: "replyDelay", ms: 1_000, match: reserveSha });
    const res = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: buyer.token });
    proxy.set({ kind: "pass" });
    expect(proxy.held).toBeGreaterThanOrEqual(1);
    // Today's code answered 503 "nothing reserved" here while the buyer held the unit.
    expect({ status: res.status, success: res.body.success }).toEqual({ status: 200, success: true });
    const orderId = res.body.data as string;
    expect(orderId).toMatch(/^\d+$/);
    expect(t.deps.isolate.seckillLostReplies.reserved).toBe(settledBefore + 1);

    // A retry is told the same order (DUPLICATE_ORDER carries it).
    const again = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: buyer.token });
    expect({ code: again.body.code, data: again.body.data }).toEqual({ code: "DUPLICATE_ORDER", data: orderId });

    // Announced and indexed like any other: the writer puts it in MySQL exactly once.
    await eventually(
      "the lost-reply order is in MySQL",
      async () => (await orderRows(voucherId, buyer.userId)).length > 0,
    );
    expect(await orderRows(voucherId, buyer.userId)).toEqual([orderId]);
    const view = await call<{ id: string }>(t.app, "GET", `/api/voucher-order/${orderId}`, { token: buyer.token });
    expect(view.body.success).toBe(true);
  }, 40_000);

  test("a reservation that never ran is fenced: the buyer is told nothing was reserved, and a late execution cannot reserve", async () => {
    const { shopId, voucherId } = await createSeckill(t, { stock: 3 });
    const first = await warmBuyer();
    expect(
      (await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: first.token })).body
        .success,
    ).toBe(true);
    const stockKey = keys.seckill.stock(shopId, voucherId, 0);
    const stockBefore = Number(await direct.get(stockKey));

    const buyer = await warmBuyer();
    // A congested path for the reservation only: it is never forwarded (the caller aborts first);
    // the fence check after it gets through.
    proxy.set({ kind: "delay", ms: 1_000, match: reserveSha });
    const res = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: buyer.token });
    proxy.set({ kind: "pass" });
    expect(res.status).toBe(503);
    expect(res.body.code).toBe("UNAVAILABLE");
    expect(Number(await direct.get(stockKey))).toBe(stockBefore);
    expect(await direct.sismember(keys.seckill.buyers(shopId, voucherId), String(buyer.userId))).toBe(0);
    expect(t.deps.isolate.seckillLostReplies.fenced).toBeGreaterThanOrEqual(1);

    // The attempt's order id is fenced: that exact call arriving late changes nothing.
    const fences = await direct.keys(`seckill:{s${shopId}}:fence:*`);
    expect(fences.length).toBe(1);
    const orderId = (fences[0] as string).split(":").at(-1) as string;
    const cfg = await t.deps.isolate.caches.seckill.get(t.deps, voucherId);
    const now = Date.now();
    const r = { orderId, userId: buyer.userId, voucherId, shopId, reservedAt: now, amount: 8000 };
    const late = await scriptsFor(direct).reserveStock.exec(
      reserveKeys(cfg!, buyer.userId, "10.0.0.1", serviceDay(now, t.deps.config.SERVICE_TIME_ZONE), orderId),
      reserveArgs(t.deps.config, r, cfg!),
    );
    expect(late[0]).toBe(8);
    expect(Number(await direct.get(stockKey))).toBe(stockBefore);
    expect(await direct.hexists(keys.seckill.outbox(shopId), orderId)).toBe(0);

    // The buyer retries and buys normally.
    const retry = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: buyer.token });
    expect(retry.body.success).toBe(true);
  }, 40_000);

  test("reply and check both lost: 503 OUTCOME_UNKNOWN with Retry-After; the order is still drained, and a retry learns it", async () => {
    const { voucherId } = await createSeckill(t, { stock: 5 });
    const first = await warmBuyer();
    expect(
      (await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: first.token })).body
        .success,
    ).toBe(true);

    const buyer = await warmBuyer();
    // The reservation's reply and its settling check's reply both held (the writer's own commands
    // pass: a claim whose reply is lost would hold its group for a whole claim lease).
    proxy.set({ kind: "replyDelay", ms: 1_000, match: [reserveSha, fenceSha] });
    const res = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: buyer.token });
    proxy.set({ kind: "pass" });
    expect(res.status).toBe(503);
    expect(res.body.code).toBe("OUTCOME_UNKNOWN");
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);

    // The script did run; its order was announced anyway, so the writer drains it without the sweep.
    await eventually(
      "the unknown-outcome order is in MySQL",
      async () => (await orderRows(voucherId, buyer.userId)).length === 1,
    );
    const [orderId] = await orderRows(voucherId, buyer.userId);
    const retry = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: buyer.token });
    expect({ code: retry.body.code, data: retry.body.data }).toEqual({ code: "DUPLICATE_ORDER", data: orderId });
  }, 40_000);
});

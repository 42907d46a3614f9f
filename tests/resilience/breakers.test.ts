/**
 * Chaos: Redis and MySQL made slow and made to fail behind HTTP fault proxies (scripts/stack/
 * fault-proxy.ts) in front of the Upstash-REST and PlanetScale-HTTP stand-ins, with the app's
 * production SDKs and its per-dependency timeouts and breakers (src/resilience.ts).
 *
 * Asserted: no request waits past its dependency's timeout (plus a margin); the breaker opens
 * once the failed share of its window's calls passes BREAKER_FAILURE_RATIO (set low here) and then calls fail fast without reaching the proxy; L1-served
 * reads keep their latency and stay on the fast lane; feed, likes and sign-in answer 503 with
 * Retry-After without calling Redis; seckill answers 503 and Redis stock is unchanged (fails
 * closed); MySQL slow → cached shops still served, a cold one is a 503 envelope in bounded time;
 * healed → the service recovers by itself (no reset), observed by polling conditions.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Client as DbClient } from "@planetscale/database";
import { Redis } from "@upstash/redis";
import { keys } from "../../src/redis/keys.ts";
import { startFaultProxy, type FaultProxy } from "../../scripts/stack/fault-proxy.ts";
import { call } from "../support/http.ts";
import { createSeckill } from "../support/seckill.ts";
import { newShop, newUser, postBlog, type TestUser } from "../support/social.ts";
import { createTestApp, eventually, getStack, type TestApp } from "../support/stack.ts";

/**
 * 200 ms, not less: the fail-fast checks below bound a refused request by half of it. A refused
 * seckill request (three at once, through the whole app) measured up to 35 ms with the machine's
 * two cores loaded by eight busy loops — too close to the 50 ms that a 100 ms timeout gave. Half
 * the timeout still separates "refused at once" from "waited for the timeout", and redisProxy.seen
 * proves that nothing reached Redis.
 */
const REDIS_TIMEOUT_MS = 200;
const MYSQL_TIMEOUT_MS = 150;
const THRESHOLD = 3;
const HALF_OPEN_AFTER_MS = 3000;
/** Scheduling slack on a shared 2-core machine: a request may exceed its timeout by this much. */
const MARGIN_MS = 150;

let redisProxy: FaultProxy;
let mysqlProxy: FaultProxy;
let t: TestApp;
let user: TestUser;
let shopId: number;
let blogId: number;
let voucher: { shopId: number; voucherId: number };
/** Redis without the proxy (the stand-in itself), for checks the faults must not disturb. */
let direct: Redis;

const ms = async <T>(fn: () => Promise<T>): Promise<{ value: T; ms: number }> => {
  const started = performance.now();
  const value = await fn();
  return { value, ms: performance.now() - started };
};

const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;

/** 50 sequential L1 reads of the warm shop: their latencies (ms) and how many the fast lane answered. */
async function l1Reads(): Promise<{ p50: number; viaLane: number }> {
  const lane0 = t.deps.isolate.fastLane.prepared;
  const times: number[] = [];
  for (let i = 0; i < 50; i++) {
    const r = await ms(async () => await t.app.request(`/api/shop/${shopId}`));
    expect(r.value.status).toBe(200);
    await r.value.arrayBuffer();
    times.push(r.ms);
  }
  return { p50: p50(times), viaLane: t.deps.isolate.fastLane.prepared - lane0 };
}

const breakers = async () =>
  (
    await call<
      Record<
        string,
        { state: string; failures: number; rejected: number; lastOpenedAt: number | null; lastFailure: string | null }
      >
    >(t.app, "GET", "/admin/resilience", { token: `Bearer ${t.deps.config.ADMIN_TOKEN}` })
  ).body.data ?? {};

beforeAll(async () => {
  const stack = await getStack();
  redisProxy = startFaultProxy(stack.env.UPSTASH_REDIS_REST_URL as string);
  mysqlProxy = startFaultProxy(stack.env.DATABASE_URL as string);
  direct = new Redis({
    url: stack.env.UPSTASH_REDIS_REST_URL as string,
    token: stack.env.UPSTASH_REDIS_REST_TOKEN as string,
    retry: false,
    enableTelemetry: false,
  });
  t = await createTestApp({
    UPSTASH_REDIS_REST_URL: redisProxy.url,
    DATABASE_URL: mysqlProxy.url,
    REDIS_TIMEOUT_MS: String(REDIS_TIMEOUT_MS),
    MYSQL_TIMEOUT_MS: String(MYSQL_TIMEOUT_MS),
    BREAKER_MIN_CALLS: String(THRESHOLD),
    // The set-up's successes share the breaker's window with the waves below: any failed share
    // opens it here (the ratio itself: tests/resilience/distance.test.ts).
    BREAKER_FAILURE_RATIO: "0.01",
    BREAKER_HALF_OPEN_AFTER_MS: String(HALF_OPEN_AFTER_MS),
    // Sessions stay trusted from memory for the whole test, so auth never needs Redis here and
    // the 503s below are the features' own.
    SESSION_TRUST_MS: "300000",
  });
  user = await newUser(t);
  shopId = await newShop(t);
  blogId = await postBlog(t, user, shopId);
  voucher = await createSeckill(t, { stock: 5, shopId });
  await t.settle();
});

afterAll(async () => {
  await t.settle();
  await redisProxy.stop();
  await mysqlProxy.stop();
});

async function healthy(): Promise<boolean> {
  const h = await call<{ ok: boolean; breakers: Record<string, { state: string }> }>(t.app, "GET", "/health", {
    token: `Bearer ${t.deps.config.ADMIN_TOKEN}`,
  });
  return h.status === 200 && Object.values(h.body.data?.breakers ?? {}).every((b) => b.state === "closed");
}

describe("slow and failing dependencies", () => {
  test("Redis slow (1 s) with a 200 ms timeout: bounded waits, breaker opens, fail fast, L1 keeps its latency, degraded features 503, seckill fails closed, then recovery", async () => {
    // Quiet phase: warm L1, measure.
    expect((await call(t.app, "GET", `/api/shop/${shopId}`)).status).toBe(200);
    expect((await call(t.app, "GET", "/api/user/sign/count", { token: user.token })).status).toBe(200);
    const quiet = await l1Reads();
    expect(quiet.viaLane).toBe(50);

    // Far beyond every bound below (timeout + margin), so a call that waited for Redis fails them.
    redisProxy.set({ kind: "delay", ms: 1_000 });
    // Wave 1, breaker closed: each call waits for the timeout, no longer, and answers a 503 envelope.
    const wave1 = await Promise.all(
      Array.from({ length: THRESHOLD + 2 }, () =>
        ms(() => call(t.app, "GET", "/api/user/sign/count", { token: user.token })),
      ),
    );
    for (const r of wave1) {
      expect(r.value.status).toBe(503);
      expect(r.value.body.code).toBe("UNAVAILABLE");
      expect(r.value.body.errorMsg).toContain("redis");
      expect(Number(r.value.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(r.ms).toBeLessThan(REDIS_TIMEOUT_MS + MARGIN_MS);
    }
    const opened = (await breakers()).redis;
    expect(opened?.state).toBe("open");
    expect(opened?.lastOpenedAt).toBeGreaterThan(0);

    // Wave 2, breaker open: nothing reaches Redis, everything answers at once.
    const seenBefore = redisProxy.seen;
    const stockKey = keys.seckill.stock(voucher.shopId, voucher.voucherId, 0);
    const stockBefore = await direct.get<string | number>(stockKey);
    expect(Number(stockBefore)).toBe(5);
    const wave2 = await Promise.all([
      ...Array.from({ length: 10 }, () => ms(() => call(t.app, "GET", "/api/user/sign/count", { token: user.token }))),
      ms(() => call(t.app, "POST", "/api/user/sign", { token: user.token })),
      ms(() => call(t.app, "GET", "/api/blog/of/follow", { token: user.token })),
      ms(() => call(t.app, "PUT", `/api/blog/like/${blogId}`, { token: user.token })),
      ms(() => call(t.app, "GET", `/api/blog/likes/${blogId}`, { token: user.token })),
    ]);
    for (const r of wave2) {
      expect(r.value.status).toBe(503);
      expect(r.value.body.errorMsg).toMatch(/switched off while redis is unavailable/);
      expect(Number(r.value.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(r.ms).toBeLessThan(REDIS_TIMEOUT_MS / 2);
    }
    // Seckill fails closed: 503, never a sale without Redis.
    const buys = await Promise.all(
      Array.from({ length: 3 }, () =>
        ms(() => call(t.app, "POST", `/api/voucher-order/seckill/${voucher.voucherId}`, { token: user.token })),
      ),
    );
    for (const r of buys) {
      expect(r.value.status).toBe(503);
      expect(r.value.body.success).toBe(false);
      expect(r.value.body.code).toBe("UNAVAILABLE");
      expect(r.ms).toBeLessThan(REDIS_TIMEOUT_MS / 2);
    }
    // L1 reads: still the fast lane, same latency class as in the quiet phase. (The L1 entry may
    // have aged past its 2 s freshness: one read serves it stale and refills it from MySQL.)
    expect((await call(t.app, "GET", `/api/shop/${shopId}`)).status).toBe(200);
    await t.settle();
    const slow = await l1Reads();
    expect(slow.viaLane).toBe(50);
    expect(slow.p50).toBeLessThan(Math.max(quiet.p50 * 3, quiet.p50 + 0.5));
    expect(redisProxy.seen).toBe(seenBefore);
    expect(Number(await direct.get<string | number>(stockKey))).toBe(5);
    expect((await breakers()).redis?.rejected).toBeGreaterThan(0);

    // /health names the open breaker and answers 503 without waiting.
    const h = await ms(() =>
      call<{ ok: boolean; redis: { ok: boolean; error?: string }; breakers: Record<string, { state: string }> }>(
        t.app,
        "GET",
        "/health",
        { token: `Bearer ${t.deps.config.ADMIN_TOKEN}` },
      ),
    );
    expect(h.value.status).toBe(503);
    expect(h.value.body.data?.breakers.redis?.state).toMatch(/open|halfOpen/);
    expect(h.ms).toBeLessThan(REDIS_TIMEOUT_MS + MARGIN_MS);

    // Healed: the next probe after BREAKER_HALF_OPEN_AFTER_MS closes the breaker; nobody resets it.
    redisProxy.set({ kind: "pass" });
    await eventually("Redis breaker closed and /health green", healthy, 15_000, 100);
    const after = await call<number>(t.app, "GET", "/api/user/sign/count", { token: user.token });
    expect(after.status).toBe(200);
    const bought = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucher.voucherId}`, {
      token: user.token,
    });
    expect(bought.body.success).toBe(true);
    expect(Number(await direct.get<string | number>(stockKey))).toBe(4);
    await t.settle();
  }, 30_000);

  test("Redis failing (502 from a gateway): the breaker opens, cached reads are served, the failure counts are visible", async () => {
    expect((await call(t.app, "GET", `/api/shop/${shopId}`)).status).toBe(200);
    const before = (await breakers()).redis;
    redisProxy.set({ kind: "fail" });
    for (let i = 0; i < THRESHOLD; i++) {
      expect((await call(t.app, "GET", "/api/user/sign/count", { token: user.token })).status).toBe(503);
    }
    const b = (await breakers()).redis;
    expect(b?.state).toBe("open");
    // The calls that reached the gateway failed until the ratio was met; once open, sign-in is
    // switched off without calling Redis at all (http/degrade.ts).
    expect((b?.failures ?? 0) - (before?.failures ?? 0)).toBeGreaterThanOrEqual(1);
    expect(b?.lastFailure).toBeTruthy();
    // An L1 entry past its freshness is served at once (no wait on Redis) and refreshed from
    // MySQL in the background: a change made in MySQL behind the cache shows up.
    const renamed = `renamed-${crypto.randomUUID().slice(0, 8)}`;
    await new DbClient({ url: (await getStack()).env.DATABASE_URL as string }).execute(
      "UPDATE tb_shop SET name = ? WHERE id = ?",
      [renamed, shopId],
    );
    const stale0 = t.deps.isolate.caches.shop.counters.staleServes;
    await eventually(
      "the renamed shop is served while Redis is down",
      async () => {
        const r = await ms(() => call<{ name: string }>(t.app, "GET", `/api/shop/${shopId}`));
        expect(r.value.status).toBe(200);
        expect(r.ms).toBeLessThan(REDIS_TIMEOUT_MS / 2);
        return r.value.body.data?.name === renamed;
      },
      15_000,
      100,
    );
    expect(t.deps.isolate.caches.shop.counters.staleServes).toBeGreaterThan(stale0);
    expect((await breakers()).redis?.state).not.toBe("closed");
    // A read that misses L1 goes to MySQL (Redis skipped), so the shop is still served.
    t.deps.isolate.caches.shop.clearL1();
    const read = await ms(() => call(t.app, "GET", `/api/shop/${shopId}`));
    expect(read.value.status).toBe(200);
    expect(read.ms).toBeLessThan(MYSQL_TIMEOUT_MS + MARGIN_MS);
    redisProxy.set({ kind: "pass" });
    await eventually("Redis breaker closed after the 502s stop", healthy, 15_000, 100);
    await t.settle();
  }, 30_000);

  test("MySQL slow (1 s) with a 150 ms timeout: cached shops still served, a cold shop is a bounded 503, the breaker opens, then recovery", async () => {
    // Warm: in L1 and L2.
    expect((await call(t.app, "GET", `/api/shop/${shopId}`)).status).toBe(200);
    // Cold: ids in no cache (distinct, so single-flight does not merge their loads).
    const base = 900_000_000 + Math.floor(Math.random() * 1_000_000) * 10;
    const cold = base + THRESHOLD + 1;
    // Far beyond the bound below (both timeouts + margin = 500 ms), so a load that waited fails it.
    mysqlProxy.set({ kind: "delay", ms: 1_000 });
    const misses = await Promise.all(
      Array.from({ length: THRESHOLD + 1 }, (_, i) => ms(() => call(t.app, "GET", `/api/shop/${base + i}`))),
    );
    for (const r of misses) {
      expect(r.value.status).toBe(503);
      expect(r.value.body.code).toBe("UNAVAILABLE");
      expect(r.value.headers.get("retry-after")).not.toBeNull();
      // An L2 read (miss) then the MySQL load, each bounded by its own timeout.
      expect(r.ms).toBeLessThan(MYSQL_TIMEOUT_MS + REDIS_TIMEOUT_MS + MARGIN_MS);
    }
    expect((await breakers()).mysql?.state).toBe("open");
    // Open: the cold shop fails at once, the warm one is served (L1, else L2 through Redis).
    const fast = await ms(() => call(t.app, "GET", `/api/shop/${cold}`));
    expect(fast.value.status).toBe(503);
    expect(fast.ms).toBeLessThan(REDIS_TIMEOUT_MS + MARGIN_MS);
    t.deps.isolate.caches.shop.clearL1();
    const warm = await call(t.app, "GET", `/api/shop/${shopId}`);
    expect(warm.status).toBe(200);

    mysqlProxy.set({ kind: "pass" });
    await eventually("MySQL breaker closed and /health green", healthy, 15_000, 100);
    // Unknown there too: the envelope is the ordinary NOT_FOUND answer again.
    await eventually(
      "the cold id is answered from MySQL once it is back",
      async () => (await call(t.app, "GET", `/api/shop/${cold}`)).body.code === "NOT_FOUND",
      15_000,
      100,
    );
  }, 30_000);
});

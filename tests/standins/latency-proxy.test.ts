/**
 * The latency proxy (scripts/stack/latency-proxy.ts) and the stack at a distance: the production
 * SDKs (@upstash/redis, @planetscale/database) behind a proxy pay two one-way holds per call, a
 * caller that gives up while its request is held is never forwarded, the distance moves at runtime,
 * and `startStack({ distance })` hands the app the proxies' URLs. Delays are lower bounds only
 * (read from the proxy's own trace and the caller's clock); speed is for benches.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@planetscale/database";
import { Redis } from "@upstash/redis";
import { startStack, type Stack } from "../../scripts/stack/index.ts";
import { type LatencyProxy, startLatencyProxy } from "../../scripts/stack/latency-proxy.ts";
import { pollUntil } from "../support/child.ts";
import { getStack } from "../support/stack.ts";

process.env.UPSTASH_DISABLE_TELEMETRY = "1";

const ONE_WAY_MS = 25;

let base: Stack;
let direct: Redis;
const proxies: LatencyProxy[] = [];

function proxyFor(target: string, oneWayMs: number, jitterMs = 0): LatencyProxy {
  const p = startLatencyProxy(target, { oneWayMs, jitterMs });
  proxies.push(p);
  return p;
}

function redisAt(url: string, token: string, signal?: AbortSignal): Redis {
  return new Redis({ url, token, retry: false, enableTelemetry: false, enableAutoPipelining: false, signal });
}

beforeAll(async () => {
  base = await getStack();
  direct = redisAt(base.env.UPSTASH_REDIS_REST_URL as string, base.env.UPSTASH_REDIS_REST_TOKEN as string);
}, 120_000);

afterAll(async () => {
  await Promise.all(proxies.map((p) => p.stop()));
});

/** Runs `call` and returns how long it took, in performance.now() ms (the clock the proxy's trace uses). */
async function timed<T>(call: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const t0 = performance.now();
  const value = await call();
  return { value, ms: performance.now() - t0 };
}

describe("a dependency behind a latency proxy", () => {
  test("an Upstash call holds its request and its answer one way each: it takes at least 2 × oneWay, and runs once", async () => {
    const proxy = proxyFor(base.env.UPSTASH_REDIS_REST_URL as string, ONE_WAY_MS);
    const redis = redisAt(proxy.url, base.env.UPSTASH_REDIS_REST_TOKEN as string);
    const k = `latency:${crypto.randomUUID()}`;
    const { value, ms } = await timed(() => redis.set(k, "far"));
    expect(value).toBe("OK");
    expect([proxy.seen, proxy.forwarded, proxy.dropped]).toEqual([1, 1, 0]);
    const trace = proxy.last;
    if (!trace) throw new Error("the proxy recorded no call");
    expect(trace.forwardedAt - trace.receivedAt).toBeGreaterThanOrEqual(ONE_WAY_MS);
    expect(trace.returnedAt - trace.answeredAt).toBeGreaterThanOrEqual(ONE_WAY_MS);
    expect(ms).toBeGreaterThanOrEqual(2 * ONE_WAY_MS);
    expect(await direct.get(k)).toBe("far");
  });

  test("PlanetScale HTTP (credentials in the URL) through the proxy: each round trip of a transaction pays 2 × oneWay", async () => {
    const proxy = proxyFor(base.env.DATABASE_URL as string, ONE_WAY_MS);
    expect(new URL(proxy.url).username).toBe(new URL(base.env.DATABASE_URL as string).username);
    expect(new URL(proxy.url).password).toBe(new URL(base.env.DATABASE_URL as string).password);
    const db = new Client({ url: proxy.url });
    const one = await timed(() => db.execute("SELECT 1 + 1 AS two"));
    expect(one.value.rows).toEqual([{ two: 2 }]);
    expect(proxy.forwarded).toBe(1);
    expect(one.ms).toBeGreaterThanOrEqual(2 * ONE_WAY_MS);

    // BEGIN, two statements, COMMIT: sequential round trips, each paying both legs.
    const before = proxy.forwarded;
    const tx = await timed(() =>
      db.transaction(async (t) => {
        await t.execute("SELECT 1");
        await t.execute("SELECT 2");
      }),
    );
    const trips = proxy.forwarded - before;
    expect(trips).toBeGreaterThanOrEqual(3);
    expect(tx.ms).toBeGreaterThanOrEqual(trips * 2 * ONE_WAY_MS);
  });

  test("a caller that gives up while its request is held is never forwarded: the command never runs", async () => {
    // A long hold (the abort comes as soon as the proxy has the request, so the test does not wait it out).
    const proxy = proxyFor(base.env.UPSTASH_REDIS_REST_URL as string, 10_000);
    const ctl = new AbortController();
    const redis = redisAt(proxy.url, base.env.UPSTASH_REDIS_REST_TOKEN as string, ctl.signal);
    const k = `latency:aborted:${crypto.randomUUID()}`;
    const pending = redis.set(k, "must-not-land");
    await pollUntil("the proxy to hold the request", async () => proxy.seen === 1, 5_000, 5);
    ctl.abort();
    expect(await pending).not.toBe("OK");
    await pollUntil("the proxy to drop the held request", async () => proxy.dropped === 1, 5_000, 5);
    expect(proxy.seen).toBeGreaterThan(proxy.forwarded);
    expect(proxy.forwarded).toBe(0);
    expect(await direct.exists(k)).toBe(0);
  });

  test("set() moves the dependency at runtime: near, then far with jitter, then near again", async () => {
    const proxy = proxyFor(base.env.UPSTASH_REDIS_REST_URL as string, 0);
    const redis = redisAt(proxy.url, base.env.UPSTASH_REDIS_REST_TOKEN as string);
    const k = `latency:moving:${crypto.randomUUID()}`;
    expect(await redis.incr(k)).toBe(1);
    expect(proxy.last?.requestHoldMs).toBe(0);
    expect(proxy.last?.replyHoldMs).toBe(0);

    proxy.set({ oneWayMs: 40, jitterMs: 10 });
    expect(proxy.distance).toEqual({ oneWayMs: 40, jitterMs: 10 });
    const far = await timed(() => redis.incr(k));
    expect(far.value).toBe(2);
    const trace = proxy.last;
    if (!trace) throw new Error("the proxy recorded no call");
    // The holds drawn lie in [oneWay, oneWay + jitter]; the time measured is at least what was drawn.
    for (const held of [trace.requestHoldMs, trace.replyHoldMs]) {
      expect(held).toBeGreaterThanOrEqual(40);
      expect(held).toBeLessThanOrEqual(50);
    }
    expect(trace.forwardedAt - trace.receivedAt).toBeGreaterThanOrEqual(trace.requestHoldMs);
    expect(trace.returnedAt - trace.answeredAt).toBeGreaterThanOrEqual(trace.replyHoldMs);
    expect(far.ms).toBeGreaterThanOrEqual(trace.requestHoldMs + trace.replyHoldMs);

    proxy.set({ oneWayMs: 0 });
    expect(await redis.incr(k)).toBe(3);
    expect(proxy.last?.requestHoldMs).toBe(0);
    expect(proxy.forwarded).toBe(3);
    expect(() => proxy.set({ oneWayMs: -1 })).toThrow("distance.oneWayMs");
    expect(proxy.distance).toEqual({ oneWayMs: 0, jitterMs: 0 });
  });
});

describe("startStack({ distance })", () => {
  let dir: string;
  let stack: Stack;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "cityhub-distance-"));
    stack = await startStack({
      dir,
      database: "cityhub_distance",
      seckillShards: 1,
      distance: { oneWayMs: ONE_WAY_MS },
    });
  }, 120_000);

  afterAll(async () => {
    await stack?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test("the app's settings name one latency proxy per stand-in; the LOCAL_* settings stay direct", () => {
    const d = stack.distance;
    if (!d) throw new Error("no distance on a stack started with one");
    const { rest, planetscale, qstash, shards } = d.proxies;
    expect(stack.env.UPSTASH_REDIS_REST_URL).toBe(rest.url);
    expect(stack.env.DATABASE_URL).toBe(planetscale.url);
    expect(stack.env.QSTASH_URL).toBe(qstash.url);
    expect(stack.env.SECKILL_SHARD_URLS).toBe(shards.map((p) => p.url).join(","));
    expect(stack.shards.map((s) => s.env.url)).toEqual(shards.map((p) => p.url));
    expect(stack.env.UPSTASH_REDIS_REST_URL).not.toBe(stack.rest.url);
    expect(stack.env.DATABASE_URL).not.toBe(stack.planetscale.url);
    expect(stack.env.QSTASH_URL).not.toBe(stack.qstash.url);
    expect(stack.env.LOCAL_REDIS_URL).toBe(`redis://${stack.redis.host}:${stack.redis.port}`);
    expect(d.current).toEqual({ oneWayMs: ONE_WAY_MS, jitterMs: 0 });
  });

  test("a GET and the SDKs through the settings reach each stand-in, and its proxy counted them", async () => {
    const { rest, planetscale, qstash, shards } = stack.distance?.proxies ?? {};
    if (!rest || !planetscale || !qstash || !shards) throw new Error("no proxies");
    const e = stack.env;

    const stats = await fetch(`${e.UPSTASH_REDIS_REST_URL}/__standin/stats`, {
      headers: { authorization: `Bearer ${e.UPSTASH_REDIS_REST_TOKEN}` },
    });
    expect(stats.status).toBe(200);
    expect(await stats.json()).toHaveProperty("commands");
    expect(rest.forwarded).toBe(1);
    expect(rest.last?.requestHoldMs).toBe(ONE_WAY_MS);

    const keys = await fetch(`${e.QSTASH_URL}/v2/keys`, { headers: { authorization: `Bearer ${e.QSTASH_TOKEN}` } });
    expect(await keys.json()).toEqual({ current: e.QSTASH_CURRENT_SIGNING_KEY, next: e.QSTASH_NEXT_SIGNING_KEY });
    expect(qstash.forwarded).toBe(1);

    const db = new Client({ url: e.DATABASE_URL });
    expect((await db.execute("SELECT DATABASE() AS db")).rows).toEqual([{ db: "cityhub_distance" }]);
    expect(planetscale.forwarded).toBe(1);

    const shard = redisAt(
      (e.SECKILL_SHARD_URLS ?? "").split(",")[0] as string,
      (e.SECKILL_SHARD_TOKENS ?? "").split(",")[0] as string,
    );
    expect(await shard.ping()).toBe("PONG");
    expect(shards[0]?.forwarded).toBe(1);
  });

  test("stack.distance.set moves every dependency at once", async () => {
    const d = stack.distance;
    if (!d) throw new Error("no distance");
    d.set({ oneWayMs: 0, jitterMs: 0 });
    const all = [d.proxies.rest, d.proxies.planetscale, d.proxies.qstash, ...d.proxies.shards];
    expect(all.map((p) => p.distance)).toEqual(all.map(() => ({ oneWayMs: 0, jitterMs: 0 })));
    const redis = redisAt(stack.env.UPSTASH_REDIS_REST_URL as string, stack.env.UPSTASH_REDIS_REST_TOKEN as string);
    expect(await redis.ping()).toBe("PONG");
    expect(d.proxies.rest.last?.requestHoldMs).toBe(0);
    d.set({ oneWayMs: ONE_WAY_MS, jitterMs: 5 });
    expect(all.map((p) => p.distance)).toEqual(all.map(() => ({ oneWayMs: ONE_WAY_MS, jitterMs: 5 })));
  });
});

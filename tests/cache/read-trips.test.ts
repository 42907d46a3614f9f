/**
 * What a shop read waits for, counted at the Redis port: a fault proxy in front of the Upstash-REST
 * stand-in holds one kind of request at a gate (`hold`), and an answer that arrives while that
 * request is still held did not wait for it. No timing: the gate's own bound (HOLD_MS) only keeps
 * a wrong implementation from hanging — it then answers after the gate opened, and the
 * `holding` checks below fail.
 *
 *   L1 stale (past l1TtlMs, inside l1StaleMs): 0 Redis trips before the answer, one refresh behind.
 *   miss: the probe and the MySQL load before the answer; the fill (with the lock release) behind.
 */
import { afterAll, expect, test } from "bun:test";
import { type FaultProxy, startFaultProxy } from "../../scripts/stack/fault-proxy.ts";
import { type CacheOverrides, createCaches } from "../../src/caches.ts";
import { keys } from "../../src/redis/keys.ts";
import { luaSources } from "../../src/redis/scripts.ts";
import { frozenClock, type TestClock } from "../support/clock.ts";
import { createShop, createShopType } from "../support/fixtures.ts";
import { call } from "../support/http.ts";
import { createTestApp, eventually, getStack, type TestApp } from "../support/stack.ts";

const sha1 = (text: string) => new Bun.CryptoHasher("sha1").update(text).digest("hex");
const PROBE = sha1(luaSources.cacheProbe);
const FILL = sha1(luaSources.cacheFill);
/** The gate's safety bound, ms (see the header). */
const HOLD_MS = 4_000;
const ENV = { MISS_PER_ADDRESS: "0" };
/** Longer than the gate: a read that waits for a held request must see it through, not time out around it. */
const PROXIED = { ...ENV, REDIS_TIMEOUT_MS: String(HOLD_MS * 3) };

let proxy: FaultProxy;
/** Started on first use, inside a test's own (longer) timeout: the private stack may take a while. */
async function ensureProxy(): Promise<void> {
  proxy ??= startFaultProxy((await getStack()).env.UPSTASH_REDIS_REST_URL as string);
}
afterAll(async () => {
  proxy?.release();
  await proxy?.stop();
});

/** An isolate whose Redis is behind the proxy, with its own caches on `clock`. */
async function behindProxy(clock?: TestClock, policies: CacheOverrides = {}) {
  await ensureProxy();
  const t = await createTestApp({ ...PROXIED, UPSTASH_REDIS_REST_URL: proxy.url });
  const caches = createCaches(policies, {
    now: clock?.now,
    degraded: () => t.deps.isolate.resilience.redis.degraded,
  });
  t.deps.isolate.caches = caches;
  return { ...t, caches };
}

async function newShopId(writer: TestApp, name: string): Promise<number> {
  return await createShop(writer, await createShopType(writer), undefined, name);
}

const shopName = async (t: TestApp, id: number) =>
  (await call<{ name: string }>(t.app, "GET", `/api/shop/${id}`)).body.data?.name;

test("a value past its L1 freshness is answered from memory (0 Redis trips) by every reader while one refresh runs behind", async () => {
  const writer = await createTestApp(ENV);
  const id = await newShopId(writer, "kept");
  const clock = frozenClock();
  const reader = await behindProxy(clock);
  expect(await shopName(reader, id)).toBe("kept");
  await reader.settle();
  clock.advance(reader.caches.shop.policy.l1TtlMs + 1);

  proxy.set({ kind: "hold", ms: HOLD_MS, match: PROBE });
  try {
    const first = await Promise.all(Array.from({ length: 20 }, () => shopName(reader, id)));
    expect(first).toEqual(Array(20).fill("kept"));
    // The refresh's probe is at the gate: the answers above did not wait for it...
    await eventually("the refresh's probe held", async () => proxy.holding === 1, HOLD_MS / 2);
    // ...and more readers meanwhile start no second refresh.
    const more = await Promise.all(Array.from({ length: 20 }, () => shopName(reader, id)));
    expect(more).toEqual(Array(20).fill("kept"));
    expect(proxy.holding).toBe(1);
    expect(reader.caches.shop.counters.staleServes).toBe(40);
  } finally {
    proxy.release();
    proxy.set({ kind: "pass" });
  }
  await reader.settle();
  // The refresh landed: fresh again, answered from L1 without Redis.
  expect(reader.caches.shop.inMemory(id)).toBe(true);
  const hits = reader.caches.shop.counters.l1Hits;
  expect(await shopName(reader, id)).toBe("kept");
  expect(reader.caches.shop.counters.l1Hits).toBe(hits + 1);
  await writer.settle();
}, 30_000);

test("a cold read answers after the probe and the MySQL load; the fill runs behind it and holds the rebuild lock until it lands", async () => {
  const writer = await createTestApp(ENV);
  const warmup = await newShopId(writer, "warm-up");
  const id = await newShopId(writer, "cold");
  await writer.deps.isolate.caches.shop.delete(writer.deps, warmup);
  await writer.deps.isolate.caches.shop.delete(writer.deps, id);
  const reader = await behindProxy();
  // Loads the probe and fill scripts through the proxy, so the next ones are EVALSHAs it matches.
  expect(await shopName(reader, warmup)).toBe("warm-up");
  await reader.settle();

  const stack = await getStack();
  const q0 = stack.planetscale.stats().requests;
  proxy.set({ kind: "hold", ms: HOLD_MS, match: FILL });
  try {
    expect(await shopName(reader, id)).toBe("cold");
    expect(stack.planetscale.stats().requests - q0).toBe(1);
    await eventually("the fill held behind the answer", async () => proxy.holding === 1, HOLD_MS / 2);
    // Until the fill lands the lock stays taken: another isolate's reader waits for the entry, no second load.
    expect(await writer.deps.redis.exists(keys.cacheLock("shop", id))).toBe(1);
    expect(await writer.deps.redis.exists(keys.cache("shop", id))).toBe(0);
  } finally {
    proxy.release();
    proxy.set({ kind: "pass" });
  }
  await reader.settle();
  expect(await writer.deps.redis.exists(keys.cacheLock("shop", id))).toBe(0);
  expect(await writer.deps.redis.exists(keys.cache("shop", id))).toBe(1);
  await writer.settle();
}, 30_000);

test("a fill that fails behind the answer releases the rebuild lock", async () => {
  const writer = await createTestApp(ENV);
  const warmup = await newShopId(writer, "warm-up");
  const id = await newShopId(writer, "fill-fails");
  await writer.deps.isolate.caches.shop.delete(writer.deps, warmup);
  await writer.deps.isolate.caches.shop.delete(writer.deps, id);
  const reader = await behindProxy();
  expect(await shopName(reader, warmup)).toBe("warm-up");
  await reader.settle();
  proxy.set({ kind: "fail", match: FILL });
  try {
    expect(await shopName(reader, id)).toBe("fill-fails");
    await reader.settle();
  } finally {
    proxy.set({ kind: "pass" });
  }
  expect(await writer.deps.redis.exists(keys.cacheLock("shop", id))).toBe(0);
  expect(reader.caches.shop.counters.errors).toBeGreaterThanOrEqual(1);
  await writer.settle();
}, 30_000);

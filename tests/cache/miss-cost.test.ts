/**
 * What a miss costs (issue 16 item 5): "misses cost ≤ 1 Redis command each amortised". A lookup
 * of an id that does not exist is one EVALSHA (lua/cache-probe.lua): the L2 entry, or — for an id
 * above the module's ceiling (the largest id MySQL held when it was read) — "absent" without any
 * MySQL query. Counted at the Upstash-REST stand-in (commands, not round trips: auto-pipelining
 * would hide commands in one request) and at the PlanetScale stand-in. Each isolate here is fresh,
 * so nothing is answered from L1; the miss meter is off so every lookup reaches the cache.
 */
import { expect, test } from "bun:test";
import { startFaultProxy } from "../../scripts/stack/fault-proxy.ts";
import { CACHE_BUCKETS, keys } from "../../src/redis/keys.ts";
import { luaSources } from "../../src/redis/scripts.ts";
import { maxShopId } from "../../src/services/shops.ts";
import { call } from "../support/http.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { newShop } from "../support/social.ts";
import { createTestApp, getStack, type TestApp } from "../support/stack.ts";

const ENV = { MISS_PER_ADDRESS: "0", SECKILL_USER_LIMIT: "0", SECKILL_IP_LIMIT: "0" };
const sha1 = (text: string) => new Bun.CryptoHasher("sha1").update(text).digest("hex");

/** Redis commands and MySQL queries `work` caused, after the apps' background work settled. */
async function cost(apps: TestApp[], work: () => Promise<void>): Promise<{ commands: number; queries: number }> {
  for (const a of apps) await a.settle();
  const stack = await getStack();
  const c0 = stack.rest.stats().commands;
  const q0 = stack.planetscale.stats().requests;
  await work();
  for (const a of apps) await a.settle();
  return { commands: stack.rest.stats().commands - c0, queries: stack.planetscale.stats().requests - q0 };
}

/**
 * A fresh isolate whose first request already ran: its periodic background flushes (cache
 * metrics, UV; each every few seconds per isolate, whatever the traffic) have had their turn, so
 * the counts below are what the lookups themselves cost.
 */
async function warmIsolate(): Promise<TestApp> {
  const t = await createTestApp(ENV);
  expect((await call(t.app, "GET", "/api/shop-type/list")).status).toBe(200);
  await t.settle();
  return t;
}

test("200 lookups of unknown shop ids: one Redis command each, no MySQL query past the first (which reads the ceiling)", async () => {
  const t = await warmIsolate();
  // A known starting point: no ceiling yet, so the first miss loads it.
  await t.deps.redis.del(...keys.cacheCeilings("shop"));
  const max = await maxShopId(t.deps);
  const ids = Array.from({ length: 200 }, (_, i) => max + 1_000 + i * 7);
  const spent = await cost([t], async () => {
    // The first miss establishes the ceiling; the other 199 run together.
    expect((await call(t.app, "GET", `/api/shop/${ids[0]}`)).body.code).toBe("NOT_FOUND");
    const rest = await Promise.all(ids.slice(1).map((id) => call(t.app, "GET", `/api/shop/${id}`)));
    expect(rest.every((r) => r.status === 200 && r.body.code === "NOT_FOUND")).toBe(true);
  });
  // First miss: probe + fill (2), the other buckets' copies of the ceiling (CACHE_BUCKETS - 1) and
  // a MySQL load + the ceiling's MAX(id) (2); each other: probe (1). 216 commands, plus at most 2
  // of a periodic flush (UV) that 200 requests may trigger.
  expect(spent.queries).toBe(2);
  expect(spent.commands).toBeGreaterThanOrEqual(200 + CACHE_BUCKETS);
  expect(spent.commands).toBeLessThanOrEqual(202 + CACHE_BUCKETS);
});

test("a shop created above the ceiling is found at once by an isolate that had just been told its id was absent", async () => {
  const reader = await createTestApp(ENV);
  const writer = await createTestApp(ENV);
  const next = (await maxShopId(reader.deps)) + 1;
  expect((await call(reader.app, "GET", `/api/shop/${next}`)).body.code).toBe("NOT_FOUND");
  expect(await reader.deps.redis.get(keys.cacheCeiling("shop", next))).not.toBeNull();
  const id = await newShop(writer);
  expect(id).toBe(next);
  // The creating request dropped its bucket's ceiling and wrote the entry; a third isolate reads it from L2.
  expect(await writer.deps.redis.get(keys.cacheCeiling("shop", id))).toBeNull();
  const third = await createTestApp(ENV);
  expect((await call<{ id: number }>(third.app, "GET", `/api/shop/${id}`)).body.data?.id).toBe(id);
  await Promise.all([reader.settle(), writer.settle(), third.settle()]);
});

test("a known shop read cold costs 2 Redis commands (probe with the lock, fill with the unlock), not 5", async () => {
  const seeder = await createTestApp(ENV);
  const id = await newShop(seeder);
  await seeder.deps.isolate.caches.shop.delete(seeder.deps, id);
  const cold = await warmIsolate();
  const spent = await cost([seeder, cold], async () => {
    expect((await call<{ id: number }>(cold.app, "GET", `/api/shop/${id}`)).body.data?.id).toBe(id);
  });
  expect(spent).toEqual({ commands: 2, queries: 1 });
  expect(await seeder.deps.redis.exists(keys.cacheLock("shop", id))).toBe(0);
});

test("100 attempts on unknown voucher ids above the ceiling: one Redis command each, no MySQL query past the first", async () => {
  const t = await warmIsolate();
  const live = await createSeckill(t, { stock: 1 });
  const tokens = await sessionsFor(t, userIds(100));
  // Sessions are known to this isolate before the count (one ordinary request each warms them).
  await Promise.all(tokens.map((token) => call(t.app, "GET", "/api/user/me", { token })));
  await t.deps.redis.del(...keys.cacheCeilings("seckill"));
  const spent = await cost([t], async () => {
    expect(
      (await call(t.app, "POST", `/api/voucher-order/seckill/${live.voucherId + 1_000}`, { token: tokens[0] })).body
        .code,
    ).toBe("NOT_FOUND");
    const res = await Promise.all(
      tokens
        .slice(1)
        .map((token, i) => call(t.app, "POST", `/api/voucher-order/seckill/${live.voucherId + 1_001 + i}`, { token })),
    );
    expect(res.every((r) => r.body.code === "NOT_FOUND")).toBe(true);
  });
  // 100 probes, 1 fill and the other buckets' copies of the ceiling.
  expect(spent).toEqual({ commands: 100 + CACHE_BUCKETS, queries: 2 });
});

test("a probe whose reply is lost after it took the rebuild lock: the reader is still answered, and the lock is not left for long", async () => {
  const stack = await getStack();
  const proxy = startFaultProxy(stack.env.UPSTASH_REDIS_REST_URL as string);
  try {
    const env = { ...ENV, UPSTASH_REDIS_REST_URL: proxy.url, REDIS_TIMEOUT_MS: "1000" };
    const seeder = await createTestApp(env);
    const id = await newShop(seeder);
    const shops = seeder.deps.isolate.caches.shop;
    await shops.delete(seeder.deps, id);
    // Load the probe script through the healthy proxy, so the next probe is an EVALSHA the proxy matches.
    await shops.get(seeder.deps, id);
    await shops.delete(seeder.deps, id);
    proxy.set({ kind: "replyDelay", ms: 3_000, match: sha1(luaSources.cacheProbe) });
    const lost = await createTestApp(env);
    // The probe ran (and took the lock) but its answer is late: the read falls through to MySQL.
    const res = await call<{ id: number }>(lost.app, "GET", `/api/shop/${id}`);
    expect(res.status).toBe(200);
    expect(res.body.data?.id).toBe(id);
    expect(proxy.held).toBeGreaterThanOrEqual(1);
    proxy.set({ kind: "pass" });
    // The lock the lost probe took lives at most lockTtlMs; a reader meanwhile waits ≤ waitMs for it, then loads itself.
    // Still held, with a TTL: an upper bound alone would also pass PTTL -2 (gone) and -1 (held forever).
    const pttl = await seeder.deps.redis.pttl(keys.cacheLock("shop", id));
    expect(pttl).toBeGreaterThan(0);
    expect(pttl).toBeLessThanOrEqual(shops.policy.lockTtlMs);
    const other = await createTestApp(env);
    expect((await call<{ id: number }>(other.app, "GET", `/api/shop/${id}`)).body.data?.id).toBe(id);
    await Promise.all([seeder.settle(), lost.settle(), other.settle()]);
  } finally {
    await proxy.stop();
  }
}, 30_000);

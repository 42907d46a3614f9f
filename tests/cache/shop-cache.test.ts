import { describe, expect, test } from "bun:test";
import { type CacheOverrides, createCaches } from "../../src/caches.ts";
import { keys } from "../../src/redis/keys.ts";
import { freePort } from "../../scripts/stack/engines.ts";
import { call } from "../support/http.ts";
import { expireNow, frozenClock, shiftedClock } from "../support/clock.ts";
import { createShop, createShopType, operator } from "../support/fixtures.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";

/**
 * A test app with its own caches ("one isolate"), optionally with custom policies, its own fetch
 * and an L1 clock the test moves (`now`; default Date.now): TTLs are crossed by moving it, not by sleeping.
 */
async function isolate(
  policies: CacheOverrides = {},
  env: Record<string, string> = {},
  opts: { fetch?: typeof fetch; now?: () => number } = {},
): Promise<TestApp & { caches: ReturnType<typeof createCaches> }> {
  const t = await createTestApp(env, opts.fetch ? { fetch: opts.fetch } : {});
  const caches = createCaches(policies, { now: opts.now, degraded: () => t.deps.isolate.resilience.redis.degraded });
  t.deps.isolate.caches = caches;
  return { ...t, caches };
}

const dbRequests = (t: TestApp) => t.stack.planetscale.stats().requests;

describe("cache modules on the real stack", () => {
  test("1,000 concurrent reads of one cold shop (logical) load MySQL at most once per isolate", async () => {
    const writer = await isolate();
    const shopId = await createShop(writer, await createShopType(writer));
    await writer.deps.redis.del(keys.cache("shop", shopId));
    const a = await isolate();
    const b = await isolate();
    const before = dbRequests(a);
    const results = await Promise.all([
      ...Array.from({ length: 500 }, () => call<{ id: number }>(a.app, "GET", `/api/shop/${shopId}`)),
      ...Array.from({ length: 500 }, () => call<{ id: number }>(b.app, "GET", `/api/shop/${shopId}`)),
    ]);
    expect(results.every((r) => r.body.success && r.body.data?.id === shopId)).toBe(true);
    const loads = [a.caches.shop.counters.originLoads, b.caches.shop.counters.originLoads];
    // At most once per isolate (b waits up to waitMs for a's rebuild, then loads itself), and at
    // least once in all: the key was cold, so 1,000 answers with no load would come from nowhere.
    expect(loads.map((n) => n <= 1)).toEqual([true, true]);
    const total = (loads[0] as number) + (loads[1] as number);
    expect(total).toBeGreaterThanOrEqual(1);
    // Each load is one shop query, plus at most one read of the ceiling (createShop dropped it).
    const queries = dbRequests(a) - before;
    expect(queries).toBeGreaterThanOrEqual(total);
    expect(queries).toBeLessThanOrEqual(2 * total);
  });

  test("1,000 concurrent reads of one cold voucher list (mutex) load MySQL at most once per isolate, once in all", async () => {
    const writer = await isolate();
    const shopId = await createShop(writer, await createShopType(writer));
    await call(writer.app, "POST", "/api/voucher", {
      token: operator(writer),
      json: { shopId, title: "10 off", payValue: 900, actualValue: 1000 },
    });
    await writer.deps.redis.del(keys.cache("voucher-list", shopId));
    const a = await isolate();
    const b = await isolate();
    const before = dbRequests(a);
    const results = await Promise.all([
      ...Array.from({ length: 500 }, () => call<unknown[]>(a.app, "GET", `/api/voucher/list/${shopId}`)),
      ...Array.from({ length: 500 }, () => call<unknown[]>(b.app, "GET", `/api/voucher/list/${shopId}`)),
    ]);
    expect(results.every((r) => r.body.success && r.body.data?.length === 1)).toBe(true);
    expect(a.caches.vouchers.counters.originLoads + b.caches.vouchers.counters.originLoads).toBe(1);
    expect(dbRequests(a) - before).toBe(1);
  });

  test("1,000 reads of a missing shop load MySQL once per null TTL", async () => {
    // (The per-address miss meter is off here: this is about the null TTL, from one address.)
    const l1TtlMs = 200;
    const clock = shiftedClock();
    const t = await isolate({ shop: { nullTtlSeconds: 1, l1TtlMs } }, { MISS_PER_ADDRESS: "0" }, { now: clock.now });
    const missing = 900_000_000 + Math.floor(Math.random() * 1e6);
    const entry = keys.cache("shop", missing);
    const ceiling = keys.cacheCeiling("shop", missing);
    // No ceiling yet (an earlier test's would answer "absent" without a load): the first miss reads it.
    await t.deps.redis.del(...keys.cacheCeilings("shop"));
    const first = await Promise.all(Array.from({ length: 1000 }, () => call(t.app, "GET", `/api/shop/${missing}`)));
    expect(first.every((r) => r.body.success === false && r.body.code === "NOT_FOUND" && r.status === 200)).toBe(true);
    expect(t.caches.shop.counters.originLoads).toBe(1);
    // The null is kept in Redis for the null TTL (1 s): not longer, and not without a TTL; the
    // ceiling written with it lives as long.
    for (const key of [entry, ceiling]) {
      const pttl = await t.deps.redis.pttl(key);
      expect([key, pttl > 0 && pttl <= 1000]).toEqual([key, true]);
    }
    // Within it, every read past the L1 TTL asks Redis and finds the null there: no load.
    const l2Before = t.caches.shop.counters.l2Hits;
    for (let i = 0; i < 5; i++) {
      clock.advance(l1TtlMs + 50);
      expect((await call(t.app, "GET", `/api/shop/${missing}`)).body.code).toBe("NOT_FOUND");
    }
    expect(t.caches.shop.counters.l2Hits - l2Before).toBe(5);
    expect(t.caches.shop.counters.originLoads).toBe(1);
    // The null TTL ends (forced: Redis expires both keys now instead of in a second): the next read past L1 loads again.
    await expireNow(t.deps.redis, entry, ceiling);
    clock.advance(l1TtlMs + 50);
    await call(t.app, "GET", `/api/shop/${missing}`);
    expect(t.caches.shop.counters.originLoads).toBe(2);
  });

  test("an expired logical entry is served stale to everyone while exactly one rebuild runs", async () => {
    const writer = await isolate();
    const shopId = await createShop(writer, await createShopType(writer), undefined, "fresh-name");
    const key = keys.cache("shop", shopId);
    const entry = (await writer.deps.redis.get<{ v: number; d: { name: string }; x: number }>(key)) as {
      v: number;
      d: { name: string };
      x: number;
    };
    await writer.deps.redis.set(
      key,
      JSON.stringify({ ...entry, d: { ...entry.d, name: "stale-name" }, x: Date.now() - 1000 }),
    );
    const a = await isolate();
    const b = await isolate();
    const results = await Promise.all([
      ...Array.from({ length: 200 }, () => call<{ name: string }>(a.app, "GET", `/api/shop/${shopId}`)),
      ...Array.from({ length: 200 }, () => call<{ name: string }>(b.app, "GET", `/api/shop/${shopId}`)),
    ]);
    expect(new Set(results.map((r) => r.body.data?.name))).toEqual(new Set(["stale-name"]));
    await Promise.all([a.settle(), b.settle()]);
    expect(a.caches.shop.counters.staleServes + b.caches.shop.counters.staleServes).toBeGreaterThanOrEqual(2);
    expect(a.caches.shop.counters.originLoads + b.caches.shop.counters.originLoads).toBe(1);
    const rebuilt = (await writer.deps.redis.get<{ d: { name: string }; x: number }>(key)) as {
      d: { name: string };
      x: number;
    };
    expect(rebuilt.d.name).toBe("fresh-name");
    expect(rebuilt.x).toBeGreaterThan(Date.now());
    const c = await isolate();
    expect((await call<{ name: string }>(c.app, "GET", `/api/shop/${shopId}`)).body.data?.name).toBe("fresh-name");
  });

  test("an L1 hit makes no Redis call", async () => {
    const t = await isolate();
    const shopId = await createShop(t, await createShopType(t));
    await call(t.app, "GET", `/api/shop/${shopId}`);
    await t.settle();
    const before = t.stack.rest.stats();
    for (let i = 0; i < 50; i++) expect((await call(t.app, "GET", `/api/shop/${shopId}`)).body.success).toBe(true);
    await t.settle();
    const after = t.stack.rest.stats();
    expect(after.commands - before.commands).toBe(0);
    expect(after.requests - before.requests).toBe(0);
    expect(t.caches.shop.counters.l1Hits).toBeGreaterThanOrEqual(50);
  });

  test("a shop update made in one isolate is visible in another one refresh after the L1 TTL, and at once past the stale window", async () => {
    const l1TtlMs = 300;
    // b's L1 clock stands still until moved, so its TTL is crossed exactly.
    const clock = frozenClock();
    const a = await isolate({ shop: { l1TtlMs } });
    const b = await isolate({ shop: { l1TtlMs } }, {}, { now: clock.now });
    const shopId = await createShop(a, await createShopType(a), undefined, "before");
    expect((await call<{ name: string }>(b.app, "GET", `/api/shop/${shopId}`)).body.data?.name).toBe("before");
    const put = await call(a.app, "PUT", "/api/shop", { token: operator(a), json: { id: shopId, name: "after" } });
    expect(put.body).toEqual({ success: true });
    expect((await call<{ name: string }>(a.app, "GET", `/api/shop/${shopId}`)).body.data?.name).toBe("after");
    // Until its L1 TTL ends b answers from memory (the bound is the L1 TTL, not some other path)...
    clock.advance(l1TtlMs - 1);
    expect((await call<{ name: string }>(b.app, "GET", `/api/shop/${shopId}`)).body.data?.name).toBe("before");
    // ...then, in the stale window, the first read is still answered from memory while one refresh runs behind it...
    clock.advance(1);
    expect((await call<{ name: string }>(b.app, "GET", `/api/shop/${shopId}`)).body.data?.name).toBe("before");
    await b.settle();
    // ...and once that refresh landed, b reads the update.
    expect((await call<{ name: string }>(b.app, "GET", `/api/shop/${shopId}`)).body.data?.name).toBe("after");
    // Past freshness and stale window together, a read waits for L2: never older than l1TtlMs + l1StaleMs.
    await call(a.app, "PUT", "/api/shop", { token: operator(a), json: { id: shopId, name: "later" } });
    clock.advance(l1TtlMs + b.caches.shop.policy.l1StaleMs);
    expect((await call<{ name: string }>(b.app, "GET", `/api/shop/${shopId}`)).body.data?.name).toBe("later");
  });

  test("with Redis down a shop is still served from MySQL", async () => {
    const writer = await isolate();
    const shopId = await createShop(writer, await createShopType(writer), undefined, "no-redis");
    const t = await isolate({}, { UPSTASH_REDIS_REST_URL: `http://127.0.0.1:${await freePort()}` });
    const res = await call<{ name: string }>(t.app, "GET", `/api/shop/${shopId}`);
    expect(res.status).toBe(200);
    expect(res.body.data?.name).toBe("no-redis");
    expect(t.caches.shop.counters.errors).toBeGreaterThan(0);
  });

  test("with MySQL down the last known value is served (stale L1), and a cold key is a 503 envelope naming the data", async () => {
    let dbDown = false;
    const faulty: typeof fetch = Object.assign(
      async (input: RequestInfo | URL, init?: RequestInit) => {
        if (dbDown) throw new TypeError("fetch failed: injected MySQL outage");
        return await fetch(input, init);
      },
      { preconnect: fetch.preconnect },
    );
    const l1TtlMs = 50;
    const clock = shiftedClock();
    const t = await isolate({ shopTypes: { l1TtlMs } }, {}, { fetch: faulty, now: clock.now });
    await createShopType(t);
    await t.deps.redis.del(keys.cache("shop-type", "all"));
    const warm = await call<unknown[]>(t.app, "GET", "/api/shop-type/list");
    expect(warm.body.success).toBe(true);
    await t.deps.redis.del(keys.cache("shop-type", "all"));
    dbDown = true;
    clock.advance(l1TtlMs + 1);
    const stale = await call<unknown[]>(t.app, "GET", "/api/shop-type/list");
    expect(stale.status).toBe(200);
    expect(stale.body.data).toEqual(warm.body.data as unknown[]);
    expect(t.caches.shopTypes.counters.staleServes).toBe(1);
    // Cold indeed: no ceiling copy left by an earlier test may answer "absent" without MySQL.
    await t.deps.redis.del(...keys.cacheCeilings("shop"));
    const cold = await call(t.app, "GET", `/api/shop/${800_000_000 + Math.floor(Math.random() * 1e6)}`);
    expect(cold.status).toBe(503);
    expect(cold.body).toMatchObject({
      success: false,
      code: "UNAVAILABLE",
      errorMsg: "shop data temporarily unavailable",
    });
    // The MySQL breaker's failure is the cause: Retry-After says when to try again.
    expect(Number(cold.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    // The same answer from every route that reads a module (one mapping, in the app's error handler).
    const coldList = await call(t.app, "GET", `/api/voucher/list/${800_000_000 + Math.floor(Math.random() * 1e6)}`);
    expect(coldList.status).toBe(503);
    expect(coldList.body).toMatchObject({
      success: false,
      code: "UNAVAILABLE",
      errorMsg: "vouchers temporarily unavailable",
    });
    expect(Number(coldList.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  });

  test("/admin/cache sums counters across isolates and needs the operator secret", async () => {
    const a = await isolate();
    const b = await isolate();
    const shopId = await createShop(a, await createShopType(a));
    expect((await call(a.app, "GET", "/admin/cache")).status).toBe(401);
    expect((await call(a.app, "GET", "/admin/cache", { token: "Bearer not-the-secret" })).status).toBe(401);
    const before =
      (
        await call<{ modules: Record<string, { l1Hits: number }> }>(a.app, "GET", "/admin/cache", {
          token: operator(a),
        })
      ).body.data?.modules.shop?.l1Hits ?? 0;
    for (let i = 0; i < 3; i++) await call(a.app, "GET", `/api/shop/${shopId}`);
    for (let i = 0; i < 4; i++) await call(b.app, "GET", `/api/shop/${shopId}`);
    await b.caches.metrics.flush(b.deps);
    const res = await call<{ modules: Record<string, { l1Hits: number; hitRatio: number }>; isolates: number }>(
      a.app,
      "GET",
      "/admin/cache",
      { token: operator(a) },
    );
    expect(res.body.success).toBe(true);
    // a: 2 L1 hits after its first read; b: 3 after its first read.
    expect((res.body.data?.modules.shop?.l1Hits ?? 0) - before).toBeGreaterThanOrEqual(5);
    expect(res.body.data?.isolates).toBeGreaterThanOrEqual(2);
    expect(Object.keys(res.body.data?.modules ?? {})).toEqual(["shop", "shop-type", "voucher-list", "user", "seckill"]);
  });
});

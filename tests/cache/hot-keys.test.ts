/**
 * Hot keys (src/cache/hot.ts): found per isolate, promoted to a longer L1 TTL, demoted when they
 * cool, invalidated by writes through the write log, reported across isolates.
 *
 * Each "isolate" is its own createTestApp (own deps.isolate) with caches on a manual L1 clock, so
 * the windows and TTLs are crossed by moving the clock, not by sleeping. Redis reads are counted
 * at the port (tests/support/faults.ts wraps deps.redis).
 */
import { describe, expect, test } from "bun:test";
import { createApp } from "../../src/app.ts";
import type { HotKeyRule } from "../../src/cache/hot.ts";
import { type Caches, createCaches } from "../../src/caches.ts";
import { Faults } from "../support/faults.ts";
import { createShop, createShopType, operator } from "../support/fixtures.ts";
import { call } from "../support/http.ts";
import { createTestApp } from "../support/stack.ts";

/** The defaults of src/env.ts: ≥ 20 reads in 2 s promote to 30 s. */
const RULE: HotKeyRule = { reads: 20, windowMs: 2_000, l1TtlMs: 30_000, maxPromoted: 1_000, reportTop: 20 };
/** The shop module's own L1 TTL (src/caches.ts). */
const SHOP_L1_MS = 2_000;

interface Clock {
  t: number;
  now(): number;
}

async function isolate(clock: Clock) {
  const faults = new Faults();
  const t = await createTestApp({}, { wrap: (deps) => faults.wrap(deps) });
  const caches: Caches = createCaches(
    {},
    { hot: RULE, now: () => clock.now(), degraded: () => t.deps.isolate.resilience.redis.degraded },
  );
  t.deps.isolate.caches = caches;
  // After installing: the fast lane binds the isolate's caches when the app is built.
  const app = createApp(t.deps);
  /** Redis commands this isolate sent, except the metrics flush's pipeline (the allowed background work). */
  const redisReads = () =>
    [...faults.calls].filter(([k]) => k.startsWith("redis.") && k !== "redis.pipeline").reduce((n, [, v]) => n + v, 0);
  const read = async (shopId: number, times = 1) => {
    for (let i = 0; i < times; i++) {
      const res = await call<{ id: number; name: string }>(app, "GET", `/api/shop/${shopId}`);
      expect(res.body.success).toBe(true);
    }
    return (await call<{ id: number; name: string }>(app, "GET", `/api/shop/${shopId}`)).body.data;
  };
  const flush = () => caches.metrics.flush(t.deps);
  /** The first flush after a cache read anchors the isolate's write-log cursor; nothing is promoted before it. */
  const anchor = async (shopId: number) => {
    await read(shopId, 0);
    await t.settle();
    await flush();
    expect(caches.hot?.ready).toBe(true);
  };
  return { ...t, app, caches, faults, redisReads, read, flush, anchor };
}

function clockAt(): Clock {
  const c: Clock = { t: Date.now(), now: () => c.t };
  return c;
}

describe("hot keys", () => {
  test("a key hammered from two isolates is promoted within the window, stops costing Redis reads past the normal TTL, and is reported from both", async () => {
    const clock = clockAt();
    const a = await isolate(clock);
    const b = await isolate(clock);
    const typeId = await createShopType(a);
    const hotShop = await createShop(a, typeId);
    const coldShop = await createShop(a, typeId);
    await a.anchor(coldShop);
    await b.anchor(coldShop);

    for (const t of [a, b]) {
      await t.read(hotShop, 24);
      await t.read(coldShop, 4);
      expect(t.caches.shop.isPromoted(hotShop)).toBe(true);
      expect(t.caches.shop.isPromoted(coldShop)).toBe(false);
    }

    // Past the shop module's L1 TTL, within the hot TTL: the hot key is still answered from L1.
    clock.t += SHOP_L1_MS + 500;
    for (const t of [a, b]) {
      const before = t.redisReads();
      await t.read(hotShop, 30);
      expect(t.redisReads() - before).toBe(0);
      expect(t.caches.shop.isPromoted(hotShop)).toBe(true);
      // The cold key went back to Redis, as before.
      const coldBefore = t.redisReads();
      await t.read(coldShop);
      expect(t.redisReads() - coldBefore).toBeGreaterThan(0);
    }

    // The operator view (either isolate answers) lists the hot key, reported by both isolates.
    await a.flush();
    await b.flush();
    expect((await call(a.app, "GET", "/admin/cache/hot")).status).toBe(401);
    const res = await call<{
      top: { module: string; key: string; reads: number; isolates: number }[];
      promotedHere: { module: string; key: string }[];
    }>(b.app, "GET", "/admin/cache/hot", { token: operator(b) });
    expect(res.status).toBe(200);
    const row = res.body.data?.top.find((r) => r.module === "shop" && r.key === String(hotShop));
    expect(row?.isolates).toBe(2);
    expect(row?.reads).toBeGreaterThanOrEqual(2 * RULE.reads);
    expect(res.body.data?.top.some((r) => r.key === String(coldShop))).toBe(false);
    expect(res.body.data?.promotedHere).toContainEqual({ module: "shop", key: String(hotShop) });
  });

  test("a promoted key that cools for a window is demoted back to the module's TTL", async () => {
    const clock = clockAt();
    const t = await isolate(clock);
    const shopId = await createShop(t, await createShopType(t));
    await t.anchor(shopId);
    await t.read(shopId, 25);
    expect(t.caches.shop.isPromoted(shopId)).toBe(true);

    // A quiet window: 3 reads (still L1, still promoted: the window before was hot).
    clock.t += RULE.windowMs + 100;
    const quietBefore = t.redisReads();
    await t.read(shopId, 2);
    expect(t.redisReads() - quietBefore).toBe(0);
    expect(t.caches.shop.isPromoted(shopId)).toBe(true);

    // The first read after that quiet window demotes it; its value is older than the module's TTL, so it goes to Redis.
    clock.t += RULE.windowMs + 100;
    const before = t.redisReads();
    await t.read(shopId);
    expect(t.caches.shop.isPromoted(shopId)).toBe(false);
    expect(t.redisReads() - before).toBeGreaterThan(0);

    // Back to the normal TTL: past it, the next read costs Redis again (the refresh of a value in
    // its stale window runs behind the answer: settled before and after, so it is counted).
    await t.settle();
    clock.t += SHOP_L1_MS + 100;
    const again = t.redisReads();
    await t.read(shopId);
    await t.settle();
    expect(t.redisReads() - again).toBeGreaterThan(0);
  });

  test("a write in one isolate reaches another isolate's promoted copy at its next flush, not after the hot TTL", async () => {
    const clock = clockAt();
    const writer = await isolate(clock);
    const reader = await isolate(clock);
    const shopId = await createShop(writer, await createShopType(writer), undefined, "before");
    await writer.anchor(shopId);
    await reader.anchor(shopId);
    expect((await reader.read(shopId, 25))?.name).toBe("before");
    expect(reader.caches.shop.isPromoted(shopId)).toBe(true);

    const put = await call(writer.app, "PUT", "/api/shop", {
      token: operator(writer),
      json: { id: shopId, name: "after" },
    });
    expect(put.body).toEqual({ success: true });
    // Until the reader's next flush (≤ one flush period) it may still serve its promoted copy;
    // right after it, the write wins — long before the hot TTL (the clock has not moved at all).
    await reader.flush();
    expect((await reader.read(shopId))?.name).toBe("after");
    expect(reader.caches.shop.isPromoted(shopId)).toBe(false);
  });

  test("a failed flush demotes every promoted key (a write might be unseen)", async () => {
    const clock = clockAt();
    const t = await isolate(clock);
    const shopId = await createShop(t, await createShopType(t));
    await t.anchor(shopId);
    await t.read(shopId, 25);
    expect(t.caches.shop.isPromoted(shopId)).toBe(true);
    t.faults.on("redis.pipeline", "fail", { times: 1 });
    await expect(t.flush()).rejects.toThrow();
    expect(t.caches.shop.isPromoted(shopId)).toBe(false);
    // No promotion until a flush succeeds again.
    clock.t += RULE.windowMs + 100;
    await t.read(shopId, 25);
    expect(t.caches.shop.isPromoted(shopId)).toBe(false);
    await t.flush();
    clock.t += RULE.windowMs + 100;
    // Past its L1 TTL the value is answered from memory while it is read again behind: that read
    // (begun after the flush) is the one that may be promoted.
    await t.read(shopId, 0);
    await t.settle();
    await t.read(shopId, 25);
    expect(t.caches.shop.isPromoted(shopId)).toBe(true);
  });
});

/**
 * Per-IP sliding window on the anonymous listing and search routes (src/http/listing-limit.ts).
 * Each createTestApp is its own isolate; the clock is injected (deps.clock), so windows slide by
 * moving it; Redis commands are counted at the port (tests/support/faults.ts).
 */
import { describe, expect, test } from "bun:test";
import { limitKeyOf, type ListingLimiter } from "../../src/http/listing-limit.ts";
import { Faults } from "../support/faults.ts";
import { createShop, createShopType } from "../support/fixtures.ts";
import { call } from "../support/http.ts";
import { createTestApp } from "../support/stack.ts";

const WINDOW_MS = 60_000;

interface Clock {
  t: number;
  now(): number;
}

/** A manual clock 1 s into an epoch-aligned window (so the window's previous one is empty). */
function windowClock(): Clock {
  const c: Clock = { t: Math.floor(Date.now() / WINDOW_MS) * WINDOW_MS + 1_000, now: () => c.t };
  return c;
}

/** A fresh address per test, so tests (and re-runs on one stack) never share counts. */
const freshIp = () => `198.51.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}`;

async function isolate(clock: Clock, limit: number) {
  const faults = new Faults();
  // A long sync period: only the first request of an isolate starts a background sync; the tests sync explicitly.
  const t = await createTestApp(
    { LISTING_IP_LIMIT: String(limit), LISTING_IP_WINDOW_MS: String(WINDOW_MS), LISTING_SYNC_MS: "60000" },
    { clock, wrap: (deps) => faults.wrap(deps) },
  );
  const limiter = t.deps.isolate.listingLimit as ListingLimiter;
  expect(limiter).toBeDefined();
  /** Redis commands sent through this isolate's port (script handles are built locally: not commands). */
  const commands = () =>
    [...faults.calls]
      .filter(([k]) => k.startsWith("redis.") && k !== "redis.createScript")
      .reduce((n, [, v]) => n + v, 0);
  const sync = async () => {
    await t.settle();
    await limiter.sync(t.deps);
  };
  return { ...t, limiter, commands, sync };
}

describe("listing limit", () => {
  test("an address over the limit gets 429 + Retry-After from memory (no Redis) on every listing route; another address is unaffected", async () => {
    const clock = windowClock();
    const t = await isolate(clock, 5);
    const shopId = await createShop(t, await createShopType(t));
    // Warm the shop-type list's L1 (so the fast lane would answer it) from another address.
    expect((await call(t.app, "GET", "/api/shop-type/list", { ip: freshIp() })).status).toBe(200);
    const ip = freshIp();
    const allowed = [
      "/api/shop/of/name?name=zz",
      "/api/shop/of/name?name=yy",
      "/api/blog/hot",
      `/api/voucher/list/${shopId}`,
      "/api/shop-type/list",
    ];
    for (const path of allowed) expect((await call(t.app, "GET", path, { ip })).status).toBe(200);
    await t.sync();

    const before = t.commands();
    for (const path of [
      "/api/shop/of/name?name=zz",
      "/api/shop/of/type?typeId=1",
      "/api/blog/hot",
      `/api/voucher/list/${shopId}`,
      "/api/shop-type/list",
    ]) {
      for (let i = 0; i < 4; i++) {
        const res = await call(t.app, "GET", path, { ip });
        expect(res.status).toBe(429);
        expect(res.body).toMatchObject({ success: false, code: "RATE_LIMITED" });
        expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      }
    }
    await t.settle();
    expect(t.commands() - before).toBe(0);

    // Another address, and a lookup (not a listing) from the blocked one, are served.
    expect((await call(t.app, "GET", "/api/shop/of/name?name=zz", { ip: freshIp() })).status).toBe(200);
    expect((await call(t.app, "GET", `/api/shop/${shopId}`, { ip })).status).toBe(200);
  });

  test("IPv6 callers share a budget per /64; IPv4 and IPv4-mapped addresses are one", async () => {
    expect(limitKeyOf("2001:db8:1:2:aaaa::1")).toBe("2001:db8:1:2::/64");
    expect(limitKeyOf("2001:0DB8:0001:0002:ffff:ffff:ffff:ffff")).toBe("2001:db8:1:2::/64");
    expect(limitKeyOf("2001:db8::1")).toBe("2001:db8:0:0::/64");
    expect(limitKeyOf("::1")).toBe("0:0:0:0::/64");
    expect(limitKeyOf("::ffff:203.0.113.9")).toBe("203.0.113.9");
    expect(limitKeyOf("203.0.113.9")).toBe("203.0.113.9");
    const clock = windowClock();
    const t = await isolate(clock, 3);
    for (let i = 0; i < 3; i++)
      expect((await call(t.app, "GET", "/api/blog/hot", { ip: `2001:db8:77:1::${i + 1}` })).status).toBe(200);
    expect((await call(t.app, "GET", "/api/blog/hot", { ip: "2001:db8:77:1:ffff::9" })).status).toBe(429);
    expect((await call(t.app, "GET", "/api/blog/hot", { ip: "2001:db8:77:2::1" })).status).toBe(200);
  });

  test("two isolates enforce the limit together after a sync", async () => {
    const clock = windowClock();
    const x = await isolate(clock, 6);
    const y = await isolate(clock, 6);
    const ip = freshIp();
    // 4 + 4: each isolate alone is under 6.
    for (const t of [x, y])
      for (let i = 0; i < 4; i++) expect((await call(t.app, "GET", "/api/blog/hot", { ip })).status).toBe(200);
    await x.sync();
    await y.sync();
    // y learnt x's 4: 8 ≥ 6.
    expect((await call(y.app, "GET", "/api/blog/hot", { ip })).status).toBe(429);
    // x had not: its next request passes, and its next sync learns y's count.
    expect((await call(x.app, "GET", "/api/blog/hot", { ip })).status).toBe(200);
    await x.sync();
    expect((await call(x.app, "GET", "/api/blog/hot", { ip })).status).toBe(429);
    // The global count is what both isolates allowed.
    const w = Math.floor(clock.now() / WINDOW_MS);
    expect(Number(await x.deps.redis.hget(`{listing}:w${w}`, ip))).toBe(9);
  });

  test("the window slides: blocked until Retry-After, then allowed while the previous window's share decays", async () => {
    const clock = windowClock();
    const t = await isolate(clock, 5);
    const ip = freshIp();
    for (let i = 0; i < 5; i++) expect((await call(t.app, "GET", "/api/shop/of/name?name=x", { ip })).status).toBe(200);
    const blocked = await call(t.app, "GET", "/api/shop/of/name?name=x", { ip });
    expect(blocked.status).toBe(429);
    const retryAfterS = Number(blocked.headers.get("retry-after"));
    expect(retryAfterS).toBeGreaterThanOrEqual(1);
    expect(retryAfterS).toBeLessThanOrEqual(WINDOW_MS / 1000);

    // Half-way: still blocked.
    clock.t += (retryAfterS * 1000) / 2;
    expect((await call(t.app, "GET", "/api/shop/of/name?name=x", { ip })).status).toBe(429);
    // At Retry-After: allowed — once: the previous window's 5 still weigh ~5 × 59/60 (a sliding, not a fixed, window).
    clock.t += (retryAfterS * 1000) / 2;
    expect((await call(t.app, "GET", "/api/shop/of/name?name=x", { ip })).status).toBe(200);
    expect((await call(t.app, "GET", "/api/shop/of/name?name=x", { ip })).status).toBe(429);
    // Two windows on, the address starts afresh.
    clock.t += 2 * WINDOW_MS;
    for (let i = 0; i < 5; i++) expect((await call(t.app, "GET", "/api/shop/of/name?name=x", { ip })).status).toBe(200);
  });
});

/**
 * Misses that are cheap (issue 16 item 5, in part): probing voucher ids that do not exist can
 * neither push a live sale's config out of the isolate nor make a sale created right after the
 * probe answer NOT_FOUND to its first buyers.
 */
import { expect, test } from "bun:test";
import { frozenClock } from "../support/clock.ts";
import { call } from "../support/http.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { createTestApp } from "../support/stack.ts";

const ENV = { SECKILL_USER_LIMIT: "0", SECKILL_IP_LIMIT: "0", SOLD_OUT_MEMO_MS: "0" };

test("a voucher created after its id was probed sells to its first buyer (the creation overwrites the cached NOT_FOUND)", async () => {
  const t = await createTestApp(ENV);
  const first = await createSeckill(t, { stock: 5 });
  const [token, probe] = (await sessionsFor(t, userIds(2))) as [string, string];
  // A buyer (or a scraper) tries the next id before the sale exists: NOT_FOUND, cached.
  const next = first.voucherId + 1;
  expect((await call(t.app, "POST", `/api/voucher-order/seckill/${next}`, { token: probe })).body.code).toBe(
    "NOT_FOUND",
  );
  const created = await createSeckill(t, { stock: 5, shopId: first.shopId });
  expect(created.voucherId).toBe(next);
  const res = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${next}`, { token });
  expect(res.body.success).toBe(true);
  // Another isolate that cached the NOT_FOUND in L2 reads the config too (L2 overwritten).
  const other = await createTestApp(ENV);
  expect(await other.deps.isolate.caches.seckill.get(other.deps, next)).toMatchObject({ voucherId: next });
  await t.settle();
});

test("probing thousands of unknown voucher ids never evicts a live sale's config from the isolate", async () => {
  const t = await createTestApp(ENV, {});
  const live = await createSeckill(t, { stock: 50 });
  const tokens = await sessionsFor(t, userIds(2));
  expect(
    (await call(t.app, "POST", `/api/voucher-order/seckill/${live.voucherId}`, { token: tokens[0] })).body.success,
  ).toBe(true);
  const seckill = t.deps.isolate.caches.seckill;
  const origin = seckill.counters.originLoads;
  // More unknown ids than the module's L1 holds (policy.l1Max).
  const probes = seckill.policy.l1Max + 500;
  for (let i = 0; i < probes; i += 250) {
    await Promise.all(
      Array.from({ length: Math.min(250, probes - i) }, (_, k) => seckill.get(t.deps, 900_000_000 + i + k)),
    );
  }
  const loadsForProbes = seckill.counters.originLoads - origin;
  expect(loadsForProbes).toBeGreaterThan(0);
  // The live config is still in L1: the next attempt reads neither Redis nor MySQL for it.
  const before = { ...seckill.counters };
  expect(
    (await call(t.app, "POST", `/api/voucher-order/seckill/${live.voucherId}`, { token: tokens[1] })).body.success,
  ).toBe(true);
  expect({
    l1: seckill.counters.l1Hits - before.l1Hits,
    l2: seckill.counters.l2Hits - before.l2Hits,
    origin: seckill.counters.originLoads - before.originLoads,
  }).toEqual({ l1: 1, l2: 0, origin: 0 });
  await t.settle();
});

test("not-found lookups are metered per address: past the budget, unknown shop and voucher ids are refused from memory with no Redis command or query", async () => {
  // Background work is done before the measured requests, so none can ride along with them: the
  // isolate's clock stands still (its session sync and sale counters, started once below, are not
  // due again), and the cache counters' flush (every 5 s of real time) is run now if it is due.
  const t = await createTestApp({ ...ENV, MISS_PER_ADDRESS: "20", MISS_WINDOW_MS: "60000" }, { clock: frozenClock() });
  const live = await createSeckill(t, { stock: 5 });
  const [token, warm] = (await sessionsFor(t, userIds(2))) as [string, string];
  const ip = `10.91.${Math.floor(Math.random() * 250)}.${1 + Math.floor(Math.random() * 250)}`;
  for (let i = 0; i < 20; i++)
    expect((await call(t.app, "GET", `/api/shop/${800_000_000 + i}`, { ip })).body.code).toBe("NOT_FOUND");
  // Another buyer's attempt from another address: the upkeep a first seckill request of an isolate starts.
  expect(
    (await call(t.app, "POST", `/api/voucher-order/seckill/${live.voucherId}`, { ip: "10.92.0.2", token: warm })).body
      .success,
  ).toBe(true);
  t.deps.isolate.caches.metrics.maybeFlush(t.deps);
  await t.settle();
  const redisBefore = t.stack.rest.stats().requests;
  const dbBefore = t.stack.planetscale.stats().requests;
  const shop = await call(t.app, "GET", `/api/shop/${800_000_100}`, { ip });
  expect(shop.status).toBe(429);
  expect(Number(shop.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  const voucher = await call(t.app, "POST", `/api/voucher-order/seckill/${900_000_000}`, { ip, token });
  expect(voucher.status).toBe(429);
  expect(t.stack.rest.stats().requests - redisBefore).toBe(0);
  expect(t.stack.planetscale.stats().requests - dbBefore).toBe(0);
  // What the isolate holds is still served to that address, and other addresses are not affected.
  expect(
    (await call<string>(t.app, "POST", `/api/voucher-order/seckill/${live.voucherId}`, { ip, token })).body.success,
  ).toBe(true);
  expect((await call(t.app, "GET", `/api/shop/${800_000_100}`, { ip: "10.92.0.1" })).body.code).toBe("NOT_FOUND");
  await t.settle();
});

test("a crowd at a cold isolate for a real sale is never refused by the miss meter (only not-found lookups count)", async () => {
  const t = await createTestApp({ ...ENV, MISS_PER_ADDRESS: "5" });
  const live = await createSeckill(t, { stock: 300 });
  const cold = await createTestApp({ ...ENV, MISS_PER_ADDRESS: "5" });
  const tokens = await sessionsFor(cold, userIds(200));
  const res = await Promise.all(
    tokens.map((token) =>
      call<string>(cold.app, "POST", `/api/voucher-order/seckill/${live.voucherId}`, { token, ip: "10.93.0.1" }),
    ),
  );
  expect(res.filter((r) => r.body.success).length).toBe(200);
  await cold.settle();
});

/**
 * The global seckill admission limit (services/seckill/admission.ts) and rate-limited callers
 * answered from memory. Redis commands are counted at each app's own client (a counting proxy
 * around deps.redis, real engine behind it), by script: reserve-stock.lua and the admission lease.
 */
import { describe, expect, test } from "bun:test";
import type { Deps } from "../../src/deps.ts";
import { sweepOutbox } from "../../src/services/seckill/pipeline.ts";
import { keys } from "../../src/redis/keys.ts";
import { luaSources } from "../../src/redis/scripts.ts";
import { reserve, type ReserveResult } from "../../src/services/seckill/reserve.ts";
import { CommandCount } from "../support/command-count.ts";
import { call } from "../support/http.ts";
import { createSeckill, mysqlCounts, sessionsFor, userIds } from "../support/seckill.ts";
import { eventually, serveTestApp, type ServedApp } from "../support/stack.ts";

/**
 * A clock the test moves: frozen inside one second, so "one second" is exact. The second is a
 * random one of the last hour (inside the vouchers' sale window): the admission counters are
 * per second in the Redis every test of the process shares, and no other test uses that second.
 */
function steppedClock() {
  const back = 600 + Math.floor(Math.random() * 2400);
  const clock = { ms: (Math.floor(Date.now() / 1000) - back) * 1000 + 100, now: () => clock.ms };
  return clock;
}

const ENV = {
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: "0",
  SOLD_OUT_MEMO_MS: "0",
};

async function twoIsolates(env: Record<string, string>) {
  const clock = steppedClock();
  const count = new CommandCount();
  const wrap = (deps: Deps): Deps => ({ ...deps, redis: count.wrap(deps.redis) });
  const a = await serveTestApp(env, { clock, wrap });
  const b = await serveTestApp(env, { clock, wrap });
  // Scripts loaded, as on a warm database: a cold one answers the first EVALSHAs NOSCRIPT and the
  // SDK resends them as EVAL (src/redis/script-batch.ts), which would blur the counts below.
  await a.deps.redis.scriptLoad(luaSources.reserveStock);
  await a.deps.redis.scriptLoad(luaSources.seckillAdmission);
  count.byKind.clear();
  return { clock, count, a, b };
}

function fire(t: ServedApp, voucherId: number, users: number[]): Promise<ReserveResult[]> {
  return Promise.all(
    users.map((userId) => reserve(t.deps, { voucherId, userId, ip: `10.1.${userId % 250}.${userId % 199}` })),
  );
}

describe("seckill admission limit", () => {
  test("two isolates, 400 attempts in one second at R = 50/s: 50 reach Redis, the rest 429 at 0 Redis; the next second admits again; nothing oversold or lost", async () => {
    const { clock, count, a, b } = await twoIsolates({ ...ENV, SECKILL_ADMISSION_PER_SECOND: "50" });
    try {
      const { shopId, voucherId } = await createSeckill(a, { stock: 1000 });
      const first = (await Promise.all([fire(a, voucherId, userIds(200)), fire(b, voucherId, userIds(200))])).flat();
      const wins = first.filter((r) => r.ok);
      const refused = first.filter((r) => !r.ok);
      expect(wins.length).toBe(50);
      expect(count.get("reserve")).toBe(50);
      expect(refused.length).toBe(350);
      for (const r of refused) expect(r).toMatchObject({ ok: false, reason: "RATE_LIMITED", retryAfterMs: 900 });
      // Leases: chunks of at most R/10 = 5, so at least 50 / 5 = 10 granted for the 50 admitted, and
      // about 10 for the second (+1 per isolate told "spent").
      expect(count.get("lease")).toBeGreaterThanOrEqual(10);
      expect(count.get("lease")).toBeLessThanOrEqual(14);

      // Same second: more attempts, every one refused from memory — 0 reserve, 0 lease commands.
      const before = { reserve: count.get("reserve"), lease: count.get("lease") };
      const again = (await Promise.all([fire(a, voucherId, userIds(100)), fire(b, voucherId, userIds(100))])).flat();
      expect(again.every((r) => !r.ok && r.reason === "RATE_LIMITED")).toBe(true);
      expect({ reserve: count.get("reserve"), lease: count.get("lease") }).toEqual(before);

      // Through HTTP: the 429 envelope with Retry-After, routed and then (warm session) fast lane.
      const [token] = await sessionsFor(a, userIds(1));
      const lane = a.deps.isolate.fastLane.seckill;
      for (let i = 0; i < 2; i++) {
        const res = await call<string>(a.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token });
        expect(res.status).toBe(429);
        expect(res.headers.get("retry-after")).toBe("1");
        expect(res.body).toMatchObject({ success: false, code: "RATE_LIMITED" });
        expect(res.body.requestId).toBe(res.headers.get("x-request-id") as string);
      }
      expect(a.deps.isolate.fastLane.seckill).toBe(lane + 1);
      expect(count.get("reserve")).toBe(before.reserve);

      // The next second admits again, R more.
      clock.ms += 1000;
      const second = (await Promise.all([fire(a, voucherId, userIds(200)), fire(b, voucherId, userIds(200))])).flat();
      expect(second.filter((r) => r.ok).length).toBe(50);
      expect(count.get("reserve")).toBe(100);

      // The reservation invariants: 100 units gone, 100 buyers, 100 orders in MySQL, outbox drained.
      const orderIds = [...wins, ...second.filter((r) => r.ok)].map((r) => (r.ok ? r.orderId : ""));
      expect(new Set(orderIds).size).toBe(100);
      expect(Number(await a.deps.redis.get(keys.seckill.stock(shopId, voucherId, 0)))).toBe(900);
      expect(await a.deps.redis.scard(keys.seckill.buyers(shopId, voucherId))).toBe(100);
      await a.settle();
      await b.settle();
      // The clock is frozen in a past second (steppedClock), so every drain's notBefore (the end of
      // its window) is already past for the QStash stand-in: a writer's follow-up drain for the next
      // window is delivered at once, finds that window still empty, and its deduplication id then
      // swallows the drain the isolates publish for the second second's reservations. (In real time
      // the follow-up arrives after its window ends and finds them.) On a loaded machine both
      // isolates' first drains found work, both follow-ups burned their ids, and 50 entries waited
      // for the sweep this test never ran. The sweep is the product's net for a drain that never
      // comes: run it once, as the cron would; every entry must then reach MySQL.
      await sweepOutbox(a.deps, Date.now());
      await eventually("orders written", async () => (await mysqlCounts(a, voucherId)).orders === 100);
      await eventually("outbox drained", async () => (await a.deps.redis.hlen(keys.seckill.outbox(shopId))) === 0);
      expect(await mysqlCounts(a, voucherId)).toEqual({ orders: 100, active: 100, stock: 900 });
    } finally {
      await a.settle();
      await b.settle();
      await a.stop();
      await b.stop();
    }
  }, 60_000);

  test("several vouchers on sale at once share the total cap: attempts + granted leases ≤ floor(budget × share), plus one refused lease per isolate and voucher at most", async () => {
    // Budget 100 × share 0.5 = 50 commands per second across vouchers; no per-voucher cap.
    const { count, a, b } = await twoIsolates({
      ...ENV,
      REDIS_COMMANDS_PER_SECOND: "100",
      SECKILL_ADMISSION_SHARE: "0.5",
      SECKILL_ADMISSION_PER_SECOND: "",
    });
    try {
      const shopId = (await createSeckill(a, { stock: 1000 })).shopId;
      const v1 = (await createSeckill(a, { stock: 1000, shopId })).voucherId;
      const v2 = (await createSeckill(a, { stock: 1000, shopId })).voucherId;
      const res = (
        await Promise.all([
          fire(a, v1, userIds(100)),
          fire(b, v1, userIds(100)),
          fire(a, v2, userIds(100)),
          fire(b, v2, userIds(100)),
        ])
      ).flat();
      const admitted = res.filter((r) => r.ok).length;
      expect(admitted).toBe(count.get("reserve"));
      // Granted leases count in the total; a refused lease (the budget is spent) is one command
      // per isolate and voucher at most, after which the isolate stops asking for the second.
      expect(count.get("reserve") + count.get("lease")).toBeLessThanOrEqual(50 + 2 * 2);
      // Most of the budget is used (chunks of ≤ 5 leave little unspent).
      expect(admitted).toBeGreaterThanOrEqual(30);
    } finally {
      await a.settle();
      await b.settle();
      await a.stop();
      await b.stop();
    }
  }, 60_000);

  test("SECKILL_ADMISSION_PER_SECOND=0 turns the limit off: no lease, every attempt reaches Redis", async () => {
    const { count, a, b } = await twoIsolates({ ...ENV, SECKILL_ADMISSION_PER_SECOND: "0" });
    try {
      const { voucherId } = await createSeckill(a, { stock: 1000 });
      const res = (await Promise.all([fire(a, voucherId, userIds(100)), fire(b, voucherId, userIds(100))])).flat();
      expect(res.filter((r) => r.ok).length).toBe(200);
      expect(count.get("reserve")).toBe(200);
      expect(count.get("lease")).toBe(0);
    } finally {
      await a.settle();
      await b.settle();
      await a.stop();
      await b.stop();
    }
  }, 60_000);
});

describe("rate-limited callers are answered from memory", () => {
  test("a user over SECKILL_USER_LIMIT is refused without Redis until the window ends (reserve and the fast lane), then allowed", async () => {
    const { clock, count, a, b } = await twoIsolates({
      ...ENV,
      SECKILL_USER_LIMIT: "2",
      SECKILL_USER_WINDOW_MS: "5000",
    });
    try {
      const { voucherId } = await createSeckill(a, { stock: 1 });
      const [buyer, user] = userIds(2) as [number, number];
      expect((await reserve(a.deps, { voucherId, userId: buyer, ip: "10.2.0.1" })).ok).toBe(true);
      const attempt = () => reserve(a.deps, { voucherId, userId: user, ip: "10.2.0.2" });
      expect(await attempt()).toMatchObject({ reason: "SOLD_OUT" });
      expect(await attempt()).toMatchObject({ reason: "SOLD_OUT" });
      const limited = await attempt();
      expect(limited).toMatchObject({ reason: "RATE_LIMITED", message: "too many attempts" });
      const reserves = count.get("reserve");
      expect(reserves).toBe(4);

      // The next attempts: from memory, 0 Redis, with the time left.
      clock.ms += 1000;
      const fromMemory = await attempt();
      expect(fromMemory).toMatchObject({ reason: "RATE_LIMITED" });
      if (!limited.ok && limited.reason === "RATE_LIMITED" && !fromMemory.ok && fromMemory.reason === "RATE_LIMITED") {
        expect(fromMemory.retryAfterMs).toBe(limited.retryAfterMs - 1000);
      }
      // Through HTTP: routed once (the session warms up), then the fast lane; both 429 at 0 Redis.
      const [token] = await sessionsFor(a, [user]);
      const lane = a.deps.isolate.fastLane.seckill;
      for (let i = 0; i < 2; i++) {
        const res = await call(a.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token, ip: "10.2.0.9" });
        expect(res.status).toBe(429);
        expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
        expect(res.body).toMatchObject({ success: false, code: "RATE_LIMITED", errorMsg: "too many attempts" });
      }
      expect(a.deps.isolate.fastLane.seckill).toBe(lane + 1);
      expect(count.get("reserve")).toBe(reserves);
      // Another user of the same address is not blocked by this user's limit.
      expect(await reserve(a.deps, { voucherId, userId: userIds(1)[0] as number, ip: "10.2.0.2" })).toMatchObject({
        reason: "SOLD_OUT",
      });
      expect(count.get("reserve")).toBe(reserves + 1);

      // After the window: the user reaches Redis again.
      clock.ms += 5000;
      expect(await attempt()).toMatchObject({ reason: "SOLD_OUT" });
      expect(count.get("reserve")).toBe(reserves + 2);
    } finally {
      await a.settle();
      await b.settle();
      await a.stop();
      await b.stop();
    }
  }, 60_000);

  test("an address over SECKILL_IP_LIMIT is refused from memory for every user of it, other addresses are not", async () => {
    const { count, a, b } = await twoIsolates({ ...ENV, SECKILL_IP_LIMIT: "3", SECKILL_IP_WINDOW_MS: "5000" });
    try {
      const { voucherId } = await createSeckill(a, { stock: 1000 });
      const users = userIds(6);
      const results: ReserveResult[] = [];
      for (const userId of users) results.push(await reserve(a.deps, { voucherId, userId, ip: "10.3.0.1" }));
      expect(results.filter((r) => r.ok).length).toBe(3);
      expect(results[3]).toMatchObject({ reason: "RATE_LIMITED", message: "too many attempts from this address" });
      // Attempt 4 reached Redis and was refused there; 5 and 6 were refused from memory.
      expect(count.get("reserve")).toBe(4);
      expect(results.slice(4).every((r) => !r.ok && r.reason === "RATE_LIMITED")).toBe(true);
      expect((await reserve(a.deps, { voucherId, userId: users[5] as number, ip: "10.3.0.2" })).ok).toBe(true);
      expect(count.get("reserve")).toBe(5);
    } finally {
      await a.settle();
      await b.settle();
      await a.stop();
      await b.stop();
    }
  }, 60_000);
});

/**
 * The retry after a refill (src/services/seckill/reserve.ts): when a buyer's home shard is dry,
 * stock moves to it from the other shards and only as many dry buyers retry as units arrived
 * ("tickets"). These interleavings are forced, not hoped for:
 *
 *   - one buyer's concurrent attempts, all dry, take tickets and all but one retry find the buyer
 *     already holding a unit (DUPLICATE_ORDER): the tickets those retries did not use must go to
 *     the other dry buyers, or units stay at home while buyers are told SOLD_OUT (undersell);
 *   - a dry buyer whose SOLD_OUT reply arrives after a refill already brought units home (the
 *     reply held by a fault proxy in front of the home shard) retries for them;
 *   - the retry reuses its attempt's order id, so the per-user window must count that attempt
 *     once: with SECKILL_USER_LIMIT=1 the retry is not refused by its own first entry.
 *
 * Stock 3 over 4 shards is [1, 1, 1, 0]; every buyer here is homed on shard 0.
 */
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { startFaultProxy } from "../../scripts/stack/fault-proxy.ts";
import type { Deps } from "../../src/deps.ts";
import { keys } from "../../src/redis/keys.ts";
import { loadSeckillConfig, type SeckillConfig } from "../../src/services/seckill/config.ts";
import { reserve } from "../../src/services/seckill/reserve.ts";
import { homeShard } from "../../src/services/seckill/shards.ts";
import { seckillState } from "../../src/services/seckill/state.ts";
import { createSeckill, retireVouchers, userIds } from "../support/seckill.ts";
import { getShardStack, type ShardStack } from "../support/shards.ts";
import { createTestApp, eventually, type TestApp } from "../support/stack.ts";

const N = 4;
const BASE_ENV = { SECKILL_USER_LIMIT: "0", SECKILL_IP_LIMIT: "0", ORDER_PAY_TIMEOUT_SECONDS: "86400" };
const IP = "10.0.23.1";

let shards: ShardStack;
beforeEach(async () => {
  shards = await getShardStack(N);
});

const created: number[] = [];
let cleaner: TestApp | undefined;
afterAll(async () => {
  if (cleaner) await retireVouchers(cleaner.deps, created);
});

async function shardedApp(env: Record<string, string> = {}): Promise<TestApp> {
  return await createTestApp({ ...BASE_ENV, ...shards.env, ...env });
}

async function cfgOf(t: TestApp, voucherId: number): Promise<SeckillConfig> {
  created.push(voucherId);
  cleaner ??= t;
  const cfg = await loadSeckillConfig(t.deps, voucherId);
  if (!cfg) throw new Error(`voucher ${voucherId} not found`);
  return cfg;
}

/** `count` users whose home shard of N is 0. */
function homedAtZero(count: number): number[] {
  const out = userIds(count * N * 4).filter((u) => homeShard(u, N) === 0);
  if (out.length < count) throw new Error("not enough users homed at shard 0");
  return out.slice(0, count);
}

const outcome = (r: Awaited<ReturnType<typeof reserve>>) => (r.ok ? "ok" : r.reason);

describe("the retry after a refill", () => {
  test("one buyer's two concurrent dry attempts and another dry buyer: the ticket the duplicate retry did not use goes to the other buyer, and all 3 units sell", async () => {
    const t = await shardedApp();
    const { voucherId } = await createSeckill(t, { stock: 3 });
    const cfg = await cfgOf(t, voucherId);
    const [first, x, y] = homedAtZero(3) as [number, number, number];
    // Shard 0's own unit goes; the next buyers there are dry.
    expect(outcome(await reserve(t.deps, { voucherId, userId: first, ip: IP }))).toBe("ok");
    // x's two attempts and y's one are sent in this order, in one turn: all three find shard 0
    // empty and share one refill, which brings 2 units (shards 1 and 2 give their 1 each).
    const results = await Promise.all([
      reserve(t.deps, { voucherId, userId: x, ip: IP }),
      reserve(t.deps, { voucherId, userId: x, ip: IP }),
      reserve(t.deps, { voucherId, userId: y, ip: IP }),
    ]);
    const state = await seckillState(t.deps, cfg);
    expect({
      x: results.slice(0, 2).map(outcome).sort(),
      y: outcome(results[2] as Awaited<ReturnType<typeof reserve>>),
      stockLeft: state.shards.map((s) => s.stock),
      buyers: state.shards.map((s) => s.buyers),
    }).toEqual({ x: ["DUPLICATE_ORDER", "ok"], y: "ok", stockLeft: [0, 0, 0, 0], buyers: [3, 0, 0, 0] });
    await t.settle();
  });

  test("a dry buyer whose SOLD_OUT reply arrives after another buyer's refill brought units home retries for them (held reply, fault proxy on the home shard)", async () => {
    const urls = shards.env.SECKILL_SHARD_URLS.split(",");
    const proxy = startFaultProxy(urls[0] as string);
    try {
      const t = await shardedApp();
      // The same isolate (so the same refill gates), with shard 0 reached through the proxy.
      const viaProxy = await createTestApp({
        ...BASE_ENV,
        ...shards.env,
        SECKILL_SHARD_URLS: [proxy.url, ...urls.slice(1)].join(","),
      });
      const { shopId, voucherId } = await createSeckill(t, { stock: 4 });
      const cfg = await cfgOf(t, voucherId);
      const [first, a, b] = homedAtZero(3) as [number, number, number];
      const slowDeps: Deps = { ...t.deps, seckillShards: viaProxy.deps.seckillShards };
      expect(outcome(await reserve(t.deps, { voucherId, userId: first, ip: IP }))).toBe("ok");
      // b's attempt runs at once and finds shard 0 empty; its reply is held.
      proxy.set({ kind: "replyDelay", ms: 1_500, match: keys.seckill.userLog(shopId, voucherId, b) });
      const late = reserve(slowDeps, { voucherId, userId: b, ip: IP });
      await eventually("b's attempt ran and its reply is held", async () => proxy.held === 1);
      // Meanwhile a is dry too: its refill brings all 3 other units home, it takes one.
      expect(outcome(await reserve(t.deps, { voucherId, userId: a, ip: IP }))).toBe("ok");
      // (The interleaving is what this test is about: b has not been answered yet.)
      let answered = false;
      void late.then(() => {
        answered = true;
      });
      await Promise.resolve();
      expect(answered).toBe(false);
      proxy.set({ kind: "pass" });
      expect(outcome(await late)).toBe("ok");
      const state = await seckillState(t.deps, cfg);
      expect(state.shards.map((s) => s.buyers)).toEqual([3, 0, 0, 0]);
      expect(state.shards.map((s) => s.stock)).toEqual([1, 0, 0, 0]);
      await t.settle();
      await viaProxy.settle();
    } finally {
      await proxy.stop();
    }
  }, 30_000);

  test("SECKILL_USER_LIMIT=1: the retry after a refill reuses its attempt's order id and is not refused by its own first entry", async () => {
    const t = await shardedApp({ SECKILL_USER_LIMIT: "1", SECKILL_USER_WINDOW_MS: "60000" });
    const { voucherId } = await createSeckill(t, { stock: 3 });
    const cfg = await cfgOf(t, voucherId);
    const [first, y] = homedAtZero(2) as [number, number];
    expect(outcome(await reserve(t.deps, { voucherId, userId: first, ip: IP }))).toBe("ok");
    // y's one attempt finds shard 0 empty, a refill brings units, and its retry takes one.
    expect(outcome(await reserve(t.deps, { voucherId, userId: y, ip: IP }))).toBe("ok");
    // Not blocked from memory either: a second attempt of y is the one-per-user answer, not a 429.
    expect(outcome(await reserve(t.deps, { voucherId, userId: y, ip: IP }))).toBe("DUPLICATE_ORDER");
    const state = await seckillState(t.deps, cfg);
    expect(state.shards.map((s) => s.buyers)).toEqual([2, 0, 0, 0]);
    await t.settle();
  });
});

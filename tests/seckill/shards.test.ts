/**
 * Seckill stock sharded across Redis databases (issue 18): loading splits the stock, buyers stay
 * in their home shard, a dry home shard takes stock from the others (moves.ts), and reconcile
 * finishes a move a dead process left half-done. Each shard is its own redis-server behind its own
 * Upstash-REST stand-in (tests/support/shards.ts); commands are counted at the stand-ins.
 */
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { startFaultProxy } from "../../scripts/stack/fault-proxy.ts";
import type { Deps } from "../../src/deps.ts";
import { keys } from "../../src/redis/keys.ts";
import { luaSources, scriptsFor } from "../../src/redis/scripts.ts";
import { loadSeckillConfig, type SeckillConfig } from "../../src/services/seckill/config.ts";
import { MOVE_GRACE_MS, refillHome } from "../../src/services/seckill/moves.ts";
import { reconcile } from "../../src/services/seckill/reconcile.ts";
import { reserve } from "../../src/services/seckill/reserve.ts";
import { homeShard, shardsOf } from "../../src/services/seckill/shards.ts";
import { seckillState } from "../../src/services/seckill/state.ts";
import { call } from "../support/http.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { getShardStack, type ShardStack } from "../support/shards.ts";
import { createTestApp, getStack, type TestApp } from "../support/stack.ts";
import { retireVouchers } from "../support/seckill.ts";

const N = 4;
const BASE_ENV = { SECKILL_USER_LIMIT: "0", SECKILL_IP_LIMIT: "0", ORDER_PAY_TIMEOUT_SECONDS: "86400" };
const IP = "10.0.18.1";
const sha1 = (text: string) => new Bun.CryptoHasher("sha1").update(text).digest("hex");

let shards: ShardStack;
beforeEach(async () => {
  shards = await getShardStack(N);
});

// This file's vouchers end long ago when it is done, so the registry (and every later reconcile
// or sweep of this test process, which may have no shards configured) leaves them alone.
const created: number[] = [];
let cleaner: TestApp | undefined;
afterAll(async () => {
  if (cleaner) await retireVouchers(cleaner.deps, created);
});

/** A clock the test moves (reconcile's grace for half-done moves is MOVE_GRACE_MS). */
function testClock() {
  let offset = 0;
  return { clock: { now: () => Date.now() + offset }, advance: (ms: number) => void (offset += ms) };
}

async function shardedApp(env: Record<string, string> = {}, clock?: Deps["clock"]): Promise<TestApp> {
  return await createTestApp({ ...BASE_ENV, ...shards.env, ...env }, clock ? { clock } : {});
}

async function cfgOf(t: TestApp, voucherId: number): Promise<SeckillConfig> {
  created.push(voucherId);
  cleaner ??= t;
  const cfg = await loadSeckillConfig(t.deps, voucherId);
  if (!cfg) throw new Error(`voucher ${voucherId} not found`);
  return cfg;
}

/** Users whose home shard of `n` is `shard`. */
function usersHomedAt(shard: number, n: number, count: number): number[] {
  const out: number[] = [];
  while (out.length < count)
    for (const u of userIds(50)) if (homeShard(u, n) === shard && out.length < count) out.push(u);
  return out;
}

const commandsAtShards = () => shards.stats().reduce((a, s) => a + s.commands, 0);

describe("seckill shards", () => {
  test("a voucher created with 4 shards configured splits its stock over them (every shard holds part of it); the main database holds none of its keys", async () => {
    const t = await shardedApp();
    const { shopId, voucherId } = await createSeckill(t, { stock: 1001, buckets: 2 });
    const cfg = await cfgOf(t, voucherId);
    expect(cfg.shards).toBe(N);
    const state = await seckillState(t.deps, cfg);
    expect(state.shards.map((s) => s.stock)).toEqual([251, 250, 250, 250]);
    expect(state.shards.map((s) => s.share)).toEqual([251, 250, 250, 250]);
    expect(state.stock).toBe(1001);
    expect(await t.deps.redis.exists(keys.seckill.meta(shopId, voucherId))).toBe(0);
  });

  test("a crowd of 300 on 100 units over 4 shards: exactly 100 sold, one per user, every shard sold part, 0 left anywhere; ≤ 1.1 commands per attempt with the moves, 0 after sell-out", async () => {
    const t = await shardedApp();
    // Each shard has run the reservation script once (a fresh database answers its first EVALSHA
    // NOSCRIPT, and the client then sends the source: a cost of the first attempt per database).
    const warm = await createSeckill(t, { stock: 10 });
    await cfgOf(t, warm.voucherId);
    for (let shard = 0; shard < N; shard++)
      await reserve(t.deps, { voucherId: warm.voucherId, userId: usersHomedAt(shard, N, 1)[0] as number, ip: IP });
    const { voucherId } = await createSeckill(t, { stock: 100 });
    const cfg = await cfgOf(t, voucherId);
    const buyers = userIds(300);
    const stack = await getStack();
    await t.settle();
    const c0 = commandsAtShards();
    const m0 = stack.rest.stats().commands;
    const results = await Promise.all(buyers.map((userId) => reserve(t.deps, { voucherId, userId, ip: IP })));
    await t.settle();
    const attempts = buyers.length;
    const spent = commandsAtShards() - c0 + (stack.rest.stats().commands - m0);
    const ok = results.filter((r) => r.ok);
    expect(ok.length).toBe(100);
    expect(results.filter((r) => !r.ok && r.reason === "SOLD_OUT").length).toBe(200);
    const state = await seckillState(t.deps, cfg);
    expect(state.shards.map((s) => s.stock)).toEqual([0, 0, 0, 0]);
    expect(state.buyers).toBe(100);
    // Every shard sold part of it, to its own buyers only.
    const soldBy = state.shards.map((s) => s.buyers);
    expect(soldBy.every((n) => n > 0)).toBe(true);
    // One order per user, across shards: the winners' second attempts are duplicates.
    const winners = buyers.filter((_, i) => results[i]?.ok);
    const again = await Promise.all(winners.map((userId) => reserve(t.deps, { voucherId, userId, ip: IP })));
    expect(again.every((r) => !r.ok && r.reason === "DUPLICATE_ORDER")).toBe(true);
    expect(spent / attempts).toBeLessThanOrEqual(1.1);
    // After sell-out: attempts are answered from the isolate's memory.
    const c1 = commandsAtShards();
    const late = await Promise.all(userIds(200).map((userId) => reserve(t.deps, { voucherId, userId, ip: IP })));
    expect(late.every((r) => !r.ok && r.reason === "SOLD_OUT")).toBe(true);
    expect(commandsAtShards() - c1).toBe(0);
    await t.settle();
  });

  test("every buyer homed in one shard: the others' stock moves to it and all 40 units sell (nothing undersold)", async () => {
    const t = await shardedApp({ SOLD_OUT_MEMO_MS: "0" });
    const { voucherId } = await createSeckill(t, { stock: 40 });
    const cfg = await cfgOf(t, voucherId);
    const crowd = usersHomedAt(0, N, 80);
    const results = await Promise.all(crowd.map((userId) => reserve(t.deps, { voucherId, userId, ip: IP })));
    expect(results.filter((r) => r.ok).length).toBe(40);
    const state = await seckillState(t.deps, cfg);
    expect(state.shards.map((s) => s.stock)).toEqual([0, 0, 0, 0]);
    expect(state.shards.map((s) => s.buyers)).toEqual([40, 0, 0, 0]);
    // Shares moved with the stock: shard 0 now holds the whole sale, stock + buyers = share everywhere.
    expect(state.shards.map((s) => s.share)).toEqual([40, 0, 0, 0]);
    expect(t.deps.isolate.seckillMoves.units).toBe(30);
    await t.settle();
  });

  test("a move whose process died after the move-out: reconcile leaves it alone while it may be in flight, then finishes it once (MySQL's stock is the truth), and the units sell", async () => {
    const { clock, advance } = testClock();
    const t = await shardedApp({ SOLD_OUT_MEMO_MS: "0" }, clock);
    const { shopId, voucherId } = await createSeckill(t, { stock: 8 });
    const cfg = await cfgOf(t, voucherId);
    const donor = shardsOf(t.deps, cfg)[1];
    if (!donor) throw new Error("no shard 1");
    // The first half of a move to shard 0, as a dying process leaves it.
    const [taken] = await scriptsFor(donor.redis).seckillMoveOut.exec(
      [
        keys.seckill.meta(shopId, voucherId),
        keys.seckill.movesOut(shopId, voucherId),
        keys.seckill.stock(shopId, voucherId, 0),
      ],
      ["8", "dead-move:1", "0", String(clock.now())],
    );
    expect(taken).toBe(1);
    expect((await seckillState(t.deps, cfg)).stock).toBe(7);
    // In flight as far as reconcile can tell: not finished, and not "repaired" as lost.
    const early = (await reconcile(t.deps, clock.now())).vouchers.find((v) => v.voucherId === voucherId);
    expect(early?.repaired).toEqual([]);
    expect((await seckillState(t.deps, cfg)).stock).toBe(7);
    advance(MOVE_GRACE_MS + 1_000);
    const late = (await reconcile(t.deps, clock.now())).vouchers.find((v) => v.voucherId === voucherId);
    expect(late?.repaired).toContain("finished 1 move(s)");
    expect(late?.shards?.length).toBe(N);
    const state = await seckillState(t.deps, cfg);
    expect(state.stock).toBe(8);
    expect(state.shards.reduce((a, s) => a + (s.share ?? 0), 0)).toBe(8);
    // A second pass gives nothing twice.
    await reconcile(t.deps, clock.now());
    expect((await seckillState(t.deps, cfg)).stock).toBe(8);
    // Sold by an isolate on the real clock (ids carry their draw time; the moved clock would skew them for later tests).
    const seller = await shardedApp({ SOLD_OUT_MEMO_MS: "0" });
    const sold = await Promise.all(userIds(20).map((userId) => reserve(seller.deps, { voucherId, userId, ip: IP })));
    expect(sold.filter((r) => r.ok).length).toBe(8);
    await Promise.all([t.settle(), seller.settle()]);
  });

  test("kill -9 of a process in the middle of a move: no unit is lost for good (reconcile finishes the logged move)", async () => {
    const { clock, advance } = testClock();
    const t = await shardedApp({ SOLD_OUT_MEMO_MS: "0" }, clock);
    const { voucherId } = await createSeckill(t, { stock: 12 });
    const cfg = await cfgOf(t, voucherId);
    // A child process drains shard 0 of its own stock, then starts a refill and is killed between
    // the move-out and the move-in (it stops itself there; the parent sends SIGKILL).
    const child = spawn(process.execPath, [join(import.meta.dir, "../support/move-and-die.ts")], {
      env: { ...process.env, APP_ENV_JSON: JSON.stringify(t.deps.config), VOUCHER_ID: String(voucherId) },
      stdio: ["ignore", "pipe", "inherit"],
    });
    const exited = new Promise<number | null>((resolve) =>
      child.on("exit", (code, signal) => resolve(signal === "SIGKILL" ? -9 : code)),
    );
    await new Promise<void>((resolve, reject) => {
      child.stdout.on("data", (b: Buffer) => {
        if (b.toString().includes("moved-out")) resolve();
      });
      child.on("exit", () => reject(new Error("child exited before its move-out")));
    });
    child.kill("SIGKILL");
    expect(await exited).toBe(-9);
    const before = await seckillState(t.deps, cfg);
    expect(before.stock).toBeLessThan(12);
    advance(MOVE_GRACE_MS + 1_000);
    await reconcile(t.deps, clock.now());
    const after = await seckillState(t.deps, cfg);
    expect(after.stock).toBe(12);
    expect(after.shards.reduce((a, s) => a + (s.share ?? 0), 0)).toBe(12);
    await t.settle();
  });

  test("a move-in whose reply is lost (it ran): the unit is not credited twice when reconcile finishes the move", async () => {
    const proxy = startFaultProxy(shards.env.SECKILL_SHARD_URLS.split(",")[0] as string);
    try {
      const urls = shards.env.SECKILL_SHARD_URLS.split(",");
      urls[0] = proxy.url;
      const { clock, advance } = testClock();
      const t = await shardedApp(
        { SECKILL_SHARD_URLS: urls.join(","), REDIS_TIMEOUT_MS: "1000", SOLD_OUT_MEMO_MS: "0" },
        clock,
      );
      const { voucherId } = await createSeckill(t, { stock: 8 });
      const cfg = await cfgOf(t, voucherId);
      // Load the move-in script in shard 0 through the healthy proxy (so the next one is an EVALSHA).
      await scriptsFor(shardsOf(t.deps, cfg)[0]?.redis as Deps["redis"]).seckillMoveIn.exec(
        ["nope:meta", "nope:in", "nope:stock"],
        ["x", "1", "60"],
      );
      const home = usersHomedAt(0, N, 2);
      // Shard 0 sells its own 2 units, then its next buyer refills: the move-in's answer is held.
      for (const userId of home) expect((await reserve(t.deps, { voucherId, userId, ip: IP })).ok).toBe(true);
      proxy.set({ kind: "replyDelay", ms: 3_000, match: sha1(luaSources.seckillMoveIn) });
      expect(await refillHome(t.deps, cfg, 0)).toBe(0); // nothing known to have arrived
      proxy.set({ kind: "pass" });
      advance(MOVE_GRACE_MS + 1_000);
      await reconcile(t.deps, clock.now());
      const state = await seckillState(t.deps, cfg);
      // 8 units − 2 sold, wherever they are now; the shares still add up to the sale.
      expect(state.stock).toBe(6);
      expect(state.shards.reduce((a, s) => a + (s.share ?? 0), 0)).toBe(8);
      await t.settle();
    } finally {
      await proxy.stop();
    }
  }, 30_000);

  test("a shard database over its command budget refuses before anything runs: the buyer gets 503 with Retry-After, never a 500, and nothing is reserved", async () => {
    const t = await shardedApp();
    const { voucherId } = await createSeckill(t, { stock: 5 });
    const cfg = await cfgOf(t, voucherId);
    // A buyer per try: a try whose second rolled over reserves, and the same buyer's next try would
    // then be answered from the isolate's memory (DUPLICATE_ORDER) without reaching a shard.
    const tokens = await sessionsFor(t, userIds(5));
    const statuses: number[] = [];
    let reserved = 0;
    shards.setLimits({ commandsPerSecond: 1 });
    try {
      // Spend the second's one command on every shard (until a ping is refused), then attempt; a
      // second may roll over in between, so up to 5 tries — none may be a 500.
      let res = await call(t.app, "GET", "/health");
      for (let i = 0; i < 5 && res.status !== 503; i++) {
        for (const { redis } of shardsOf(t.deps, cfg))
          while (
            await redis.ping().then(
              () => true,
              () => false,
            )
          );
        res = await call(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, {
          token: tokens[i] as string,
          ip: IP,
        });
        statuses.push(res.status);
        if (res.body.success === true) reserved++;
      }
      expect(statuses).not.toContain(500);
      expect(res.status).toBe(503);
      expect(res.body).toMatchObject({ success: false, code: "UNAVAILABLE" });
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    } finally {
      shards.setLimits({ commandsPerSecond: null });
    }
    // Only attempts that were not refused reserved anything.
    expect((await seckillState(t.deps, cfg)).stock).toBe(5 - reserved);
    await t.settle();
  });

  test("the daily shop limit holds across two sharded vouchers of one shop, one of them smaller than the shard count (every voucher takes all shards, so a buyer's home is the same)", async () => {
    const t = await shardedApp({ SOLD_OUT_MEMO_MS: "0" });
    const small = await createSeckill(t, { stock: 2, shopDailyLimit: 1 });
    const big = await createSeckill(t, { stock: 100, shopDailyLimit: 1, shopId: small.shopId });
    expect((await cfgOf(t, small.voucherId)).shards).toBe(N);
    expect((await cfgOf(t, big.voucherId)).shards).toBe(N);
    // Homed where the small sale has no share: the unit comes by a refill.
    const [u] = usersHomedAt(3, N, 1) as [number];
    expect((await reserve(t.deps, { voucherId: small.voucherId, userId: u, ip: IP })).ok).toBe(true);
    expect(await reserve(t.deps, { voucherId: big.voucherId, userId: u, ip: IP })).toMatchObject({
      ok: false,
      reason: "LIMIT_REACHED",
    });
    await t.settle();
  });

  test("unsharded (no SECKILL_SHARD_URLS): the voucher lives in the main database with today's keys, one Redis command per attempt", async () => {
    const t = await createTestApp(BASE_ENV);
    const { shopId, voucherId } = await createSeckill(t, { stock: 5 });
    const cfg = await cfgOf(t, voucherId);
    expect(cfg.shards).toBeUndefined();
    expect(await t.deps.redis.exists(keys.seckill.meta(shopId, voucherId))).toBe(1);
    await reserve(t.deps, { voucherId, userId: userIds(1)[0] as number, ip: IP }); // warms the config and ids
    await t.settle();
    const stack = await getStack();
    const m0 = stack.rest.stats().commands;
    const s0 = commandsAtShards();
    expect((await reserve(t.deps, { voucherId, userId: userIds(1)[0] as number, ip: IP })).ok).toBe(true);
    expect(stack.rest.stats().commands - m0).toBe(1);
    expect(commandsAtShards() - s0).toBe(0);
    await t.settle();
  });
});

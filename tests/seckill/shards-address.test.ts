/**
 * The per-address seckill limit (SECKILL_IP_LIMIT per SECKILL_IP_WINDOW_MS) on a voucher sharded
 * over 4 databases: buyers of one address are homed on every shard (by user id), yet the address
 * gets at most the limit per window in total — IPv4, and IPv6 counted per /64 (LIMIT_IPV6_PREFIX) —
 * and an attempt still costs one command (the reserve EVALSHA on its home shard), nothing more.
 * The window is longer than the test, so no attempt can leave it while the test runs.
 */
import { afterAll, beforeEach, describe, expect, test } from "bun:test";
import { parseEnv } from "../../src/env.ts";
import { addressLimitIn, homeShard } from "../../src/services/seckill/shards.ts";
import { call } from "../support/http.ts";
import { createSeckill, retireVouchers, sessionsFor, userIds } from "../support/seckill.ts";
import { getShardStack, type ShardStack } from "../support/shards.ts";
import { createTestApp, getStack, type TestApp } from "../support/stack.ts";

const N = 4;
const LIMIT = 200;
const BUYERS = 1_000;
const ENV = {
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: String(LIMIT),
  SECKILL_IP_WINDOW_MS: "600000",
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  SOLD_OUT_MEMO_MS: "0",
};

let shards: ShardStack;
beforeEach(async () => {
  shards = await getShardStack(N);
});

const created: number[] = [];
let cleaner: TestApp | undefined;
afterAll(async () => {
  if (cleaner) await retireVouchers(cleaner.deps, created);
});

const commandsAtShards = () => shards.stats().reduce((a, s) => a + s.commands, 0);

/** 1,000 buyers (homed over all 4 shards), one attempt each, 100 at a time, from `ipOf(i)`. */
async function crowd(ipOf: (i: number) => string) {
  const t = await createTestApp({ ...ENV, ...shards.env });
  cleaner ??= t;
  const { voucherId } = await createSeckill(t, { stock: 2 * BUYERS });
  created.push(voucherId);
  const users = userIds(BUYERS);
  const homes = new Set(users.map((u) => homeShard(u, N)));
  expect(homes.size).toBe(N);
  const tokens = await sessionsFor(t, users);
  shards.resetStats();
  const codes = new Map<string, number>();
  for (let i = 0; i < BUYERS; i += 100) {
    const replies = await Promise.all(
      tokens
        .slice(i, i + 100)
        .map((token, j) => call(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token, ip: ipOf(i + j) })),
    );
    for (const r of replies) {
      const code = r.body.success ? "OK" : String(r.body.code);
      codes.set(code, (codes.get(code) ?? 0) + 1);
    }
  }
  const commands = commandsAtShards();
  await t.settle();
  return { codes, commands };
}

describe("the per-address seckill limit on a sharded voucher", () => {
  test("1,000 buyers from one IPv4 address get at most SECKILL_IP_LIMIT orders in the window, at one shard command per attempt at most", async () => {
    const { codes, commands } = await crowd(() => "10.23.2.1");
    const sold = codes.get("OK") ?? 0;
    expect(sold).toBeLessThanOrEqual(LIMIT);
    // Not starved either: at least one shard's whole share went through.
    expect(sold).toBeGreaterThanOrEqual(LIMIT / N);
    expect(sold + (codes.get("RATE_LIMITED") ?? 0)).toBe(BUYERS);
    expect(commands).toBeLessThanOrEqual(BUYERS);
  }, 120_000);

  test("1,000 buyers rotating through one IPv6 /64 get at most SECKILL_IP_LIMIT orders in the window", async () => {
    const net = `2001:db8:${Math.floor(Math.random() * 0xffff).toString(16)}:23`;
    const { codes, commands } = await crowd((i) => `${net}:${(i + 1).toString(16)}::1`);
    const sold = codes.get("OK") ?? 0;
    expect(sold).toBeLessThanOrEqual(LIMIT);
    expect(sold).toBeGreaterThanOrEqual(LIMIT / N);
    expect(sold + (codes.get("RATE_LIMITED") ?? 0)).toBe(BUYERS);
    expect(commands).toBeLessThanOrEqual(BUYERS);
  }, 120_000);

  test("each shard's part of the limit: they add up to the limit exactly, and a limit below the shard count is refused at start", async () => {
    for (const [limit, n] of [
      [200, 4],
      [201, 4],
      [7, 3],
      [5, 5],
      [1, 1],
    ] as const) {
      const parts = Array.from({ length: n }, (_, s) => addressLimitIn(limit, n, s));
      expect([limit, n, parts.reduce((a, b) => a + b, 0)]).toEqual([limit, n, limit]);
      expect(parts.every((p) => p >= 1)).toBe(true);
    }
    // Unsharded: the whole limit; off stays off.
    expect(addressLimitIn(200, 0, 0)).toBe(200);
    expect(addressLimitIn(0, 4, 2)).toBe(0);
    const env = (await getStack()).env;
    expect(() => parseEnv({ ...env, ...shards.env, SECKILL_IP_LIMIT: "3" })).toThrow(/SECKILL_IP_LIMIT/);
    expect(() => parseEnv({ ...env, ...shards.env, SECKILL_IP_LIMIT: "0" })).not.toThrow();
    expect(() => parseEnv({ ...env, ...shards.env, SECKILL_IP_LIMIT: "4" })).not.toThrow();
  });
});

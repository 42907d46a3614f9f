/**
 * Seckill shard databases of the local stack (issue 18): `startStack({ seckillShards })` and the
 * tests' `getShardStack(n)` start separate redis-servers, each behind its own Upstash-REST
 * stand-in with its own token, and hand the app SECKILL_SHARD_URLS / SECKILL_SHARD_TOKENS.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { errors, Redis } from "@upstash/redis";
import { startStack, type Stack } from "../../scripts/stack/index.ts";
import { parseEnv } from "../../src/env.ts";
import { getShardStack } from "../support/shards.ts";
import { getStack } from "../support/stack.ts";

process.env.UPSTASH_DISABLE_TELEMETRY = "1";

let dir: string;
let stack: Stack;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "cityhub-shard-stack-"));
  stack = await startStack({ dir, database: "cityhub_shard_smoke", seckillShards: 2, shardCommandsPerSecond: 5000 });
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const client = (url: string, token: string) => new Redis({ url, token, retry: false, enableAutoPipelining: false });

test("startStack({ seckillShards: 2 }) writes two shard URLs and two distinct tokens that the app accepts", () => {
  const urls = (stack.env.SECKILL_SHARD_URLS ?? "").split(",");
  const tokens = (stack.env.SECKILL_SHARD_TOKENS ?? "").split(",");
  expect(urls).toEqual(stack.shards.map((s) => s.env.url));
  expect(tokens).toEqual(stack.shards.map((s) => s.env.token));
  expect(new Set([...urls, stack.env.UPSTASH_REDIS_REST_URL]).size).toBe(3);
  expect(new Set([...tokens, stack.env.UPSTASH_REDIS_REST_TOKEN]).size).toBe(3);
  expect(new Set([stack.redis.port, ...stack.shards.map((s) => s.redis.port)]).size).toBe(3);
  for (let i = 1; i <= 2; i++) expect(existsSync(join(dir, "shards", String(i), "redis"))).toBe(true);
  const config = parseEnv(stack.env);
  expect(config.SECKILL_SHARD_URLS).toBe(stack.env.SECKILL_SHARD_URLS as string);
  expect(config.SECKILL_SHARD_TOKENS).toBe(stack.env.SECKILL_SHARD_TOKENS as string);
});

test("each shard is a separate redis: a SET in one is not visible in the other or in the main database", async () => {
  const [one, two] = stack.shards.map((s) => client(s.env.url, s.env.token));
  const main = client(stack.env.UPSTASH_REDIS_REST_URL as string, stack.env.UPSTASH_REDIS_REST_TOKEN as string);
  const k = `shard-smoke:${crypto.randomUUID()}`;
  for (const s of stack.shards) s.rest.resetStats();
  expect(await one?.set(k, "in-shard-1")).toBe("OK");
  expect(await one?.get(k)).toBe("in-shard-1");
  expect(await two?.get(k)).toBeNull();
  expect(await main.get(k)).toBeNull();
  expect(await two?.incr(`${k}:n`)).toBe(1);
  expect(await two?.incr(`${k}:n`)).toBe(2);
  expect(stack.shards.map((s) => s.rest.stats().commands)).toEqual([2, 3]);
});

test("a shard answers only its own token", async () => {
  const [a, b] = stack.shards;
  const wrong = client(a?.env.url as string, b?.env.token as string);
  const err = await wrong.ping().catch((e: unknown) => e);
  expect(err).toBeInstanceOf(errors.UpstashError);
  expect((err as Error).message).toStartWith("Unauthorized");
});

test("--shard-commands-per-second caps the shard stand-ins only", () => {
  expect(stack.shards.map((s) => s.rest.limits())).toEqual([{ commandsPerSecond: 5000 }, { commandsPerSecond: 5000 }]);
  expect(stack.rest.limits()).toEqual({ commandsPerSecond: null });
});

test("the test stack has no shards unless a test asks for them", async () => {
  const base = await getStack();
  expect(base.shards).toEqual([]);
  expect(base.env.SECKILL_SHARD_URLS).toBeUndefined();
  expect(base.env.SECKILL_SHARD_TOKENS).toBeUndefined();
});

test("getShardStack(n) starts n shard databases once per process, with separate stats and a flushall", async () => {
  const shards = await getShardStack(2);
  expect(await getShardStack(2)).toBe(shards);
  const urls = shards.env.SECKILL_SHARD_URLS.split(",");
  const tokens = shards.env.SECKILL_SHARD_TOKENS.split(",");
  expect(urls).toHaveLength(2);
  expect(new Set(tokens).size).toBe(2);
  const [one, two] = urls.map((u, i) => client(u, tokens[i] as string));
  shards.resetStats();
  await one?.set("k", "1");
  await one?.set("k2", "1");
  await two?.set("k", "2");
  expect(shards.stats().map((s) => s.commands)).toEqual([2, 1]);
  await shards.flushall();
  expect(await one?.dbsize()).toBe(0);
  expect(await two?.dbsize()).toBe(0);
  expect(shards.stats().map((s) => s.commands)).toEqual([3, 2]); // flushall went around the stand-ins

  shards.setLimits({ commandsPerSecond: 1 });
  try {
    const err = await Promise.all([one?.ping(), one?.ping(), one?.ping()]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(errors.UpstashError);
  } finally {
    shards.setLimits({ commandsPerSecond: null });
  }
});

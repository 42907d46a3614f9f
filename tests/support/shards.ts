/**
 * Seckill shard databases for tests, on demand: `getShardStack(n)` starts n shard databases
 * (redis-server + Upstash-REST stand-in each, scripts/stack/shards.ts — the same code
 * `startStack({ seckillShards })` runs) once per `bun test` process and n, lazily, in memory on
 * free ports under a throw-away directory like the preload stack's. Nothing is started unless a
 * test asks: most test processes never pay for shards. The preload's afterAll stops them
 * (stopShardStacks); engines.ts kills any redis-server left if the process dies first.
 *
 *   const shards = await getShardStack(2);
 *   const t = await createTestApp({ ...shards.env });
 *   beforeEach(() => shards.flushall());
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RespClient, RespError } from "../../scripts/stack/resp.ts";
import { startShards, type StackShard } from "../../scripts/stack/shards.ts";
import type { UpstashRestLimits, UpstashRestStats } from "../../scripts/stack/upstash-rest.ts";

export interface ShardStack {
  /** The settings for the app: spread into createTestApp's env. */
  env: { SECKILL_SHARD_URLS: string; SECKILL_SHARD_TOKENS: string };
  /** The shard databases in env order: `redis` (the engine), `rest` (the stand-in, with stats/limits), `env`. */
  shards: StackShard[];
  /** Each shard stand-in's stats, in shard order. */
  stats(): UpstashRestStats[];
  resetStats(): void;
  /** Sets or clears (null) the command-rate cap of every shard stand-in. */
  setLimits(limits: UpstashRestLimits): void;
  /**
   * FLUSHALL on every shard, straight to redis-server (not through the stand-ins, so neither
   * their stats nor their caps see it). Shard stacks are shared by every test file of the process
   * that asks for the same n: flush before use, or use keys no other test uses.
   */
  flushall(): Promise<void>;
}

declare global {
  // eslint-disable-next-line no-var
  var __cityhubShardStacks: Map<number, Promise<ShardStack & { stop(): Promise<void> }>> | undefined;
}

async function start(n: number): Promise<ShardStack & { stop(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), "cityhub-test-shards-"));
  try {
    const started = await startShards({
      count: n,
      dir,
      tokenPrefix: `test-shard-${crypto.randomUUID().replace(/-/g, "")}`,
    });
    const clients = started.shards.map(
      (s) => new RespClient({ host: s.redis.host, port: s.redis.port, commandTimeoutMs: 10_000 }),
    );
    return {
      env: {
        SECKILL_SHARD_URLS: started.env.SECKILL_SHARD_URLS ?? "",
        SECKILL_SHARD_TOKENS: started.env.SECKILL_SHARD_TOKENS ?? "",
      },
      shards: started.shards,
      stats: () => started.shards.map((s) => s.rest.stats()),
      resetStats: () => {
        for (const s of started.shards) s.rest.resetStats();
      },
      setLimits: (limits) => {
        for (const s of started.shards) s.rest.setLimits(limits);
      },
      flushall: async () => {
        const replies = await Promise.all(clients.map((c) => c.command(["FLUSHALL"])));
        const err = replies.find((r) => r instanceof RespError);
        if (err) throw new Error(`FLUSHALL on a shard failed: ${err.message}`);
      },
      stop: async () => {
        await Promise.all(clients.map((c) => c.close()));
        await started.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}

/** n (1…64) shard databases for this test process, started on the first call for that n. */
export async function getShardStack(n: number): Promise<ShardStack> {
  if (!Number.isInteger(n) || n < 1) throw new Error(`getShardStack: n must be a positive integer, got ${n}`);
  globalThis.__cityhubShardStacks ??= new Map();
  let stack = globalThis.__cityhubShardStacks.get(n);
  if (!stack) {
    stack = start(n);
    globalThis.__cityhubShardStacks.set(n, stack);
    // A failed start is not cached: the next call tries again.
    stack.catch(() => globalThis.__cityhubShardStacks?.delete(n));
  }
  return await stack;
}

/** Stops every shard stack this process started (the preload's afterAll). */
export async function stopShardStacks(): Promise<void> {
  const stacks = globalThis.__cityhubShardStacks;
  if (!stacks) return;
  const all = [...stacks.values()];
  stacks.clear();
  await Promise.all(all.map(async (p) => (await p.catch(() => undefined))?.stop()));
}

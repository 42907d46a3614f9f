/**
 * Seckill shard databases for the local stack (issue 18): N more Redis databases, each a
 * redis-server of its own (own port, own data directory, the main one's flags) behind an
 * Upstash-REST stand-in of its own with its own token — the local shape of N hosted Upstash
 * databases. The app reads them from SECKILL_SHARD_URLS / SECKILL_SHARD_TOKENS (src/env.ts),
 * comma-separated in shard order. Used by startStack (`--seckill-shards N`) and by
 * tests/support/shards.ts.
 */
import { join } from "node:path";
import { startRedis, type Engine } from "./engines.ts";
import { startUpstashRest, type UpstashRestServer } from "./upstash-rest.ts";

/** Most shards a stack starts; src/env.ts accepts at most MAX_SECKILL_SHARDS (64) in SECKILL_SHARD_URLS. */
export const MAX_LOCAL_SHARDS = 64;

export interface StackShard {
  redis: Engine;
  rest: UpstashRestServer;
  /** What the app is given for this shard: its REST URL and token. */
  env: { url: string; token: string };
}

export interface ShardsOptions {
  count: number;
  /** Shard i (1-based) keeps its files in `<dir>/<i>/redis`. */
  dir: string;
  persist?: boolean;
  /** Shard i's token is `<tokenPrefix>-<i>`: distinct per shard, so a URL/token mix-up fails with 401. */
  tokenPrefix: string;
  /** The command-rate cap of every shard stand-in (see upstash-rest.ts); 0/undefined: none. */
  commandsPerSecond?: number;
  /** Preferred redis-server / stand-in ports per shard, in order; missing → a free port. */
  redisPorts?: readonly number[];
  restPorts?: readonly number[];
}

export interface Shards {
  shards: StackShard[];
  /** SECKILL_SHARD_URLS / SECKILL_SHARD_TOKENS; empty object when count is 0 (neither is written). */
  env: Record<string, string>;
  stop(): Promise<void>;
}

export function validShardCount(n: unknown): n is number {
  return typeof n === "number" && Number.isInteger(n) && n >= 0 && n <= MAX_LOCAL_SHARDS;
}

/** The app's settings for `shards`, or {} for none. */
export function shardEnv(shards: readonly StackShard[]): Record<string, string> {
  if (shards.length === 0) return {};
  return {
    SECKILL_SHARD_URLS: shards.map((s) => s.env.url).join(","),
    SECKILL_SHARD_TOKENS: shards.map((s) => s.env.token).join(","),
    // Raw engine addresses, for tools (redis-cli) and benchmarks, not read by the app.
    LOCAL_SECKILL_SHARD_REDIS_URLS: shards.map((s) => `redis://${s.redis.host}:${s.redis.port}`).join(","),
  };
}

async function startShard(opts: ShardsOptions, i: number): Promise<StackShard> {
  const redis = await startRedis({
    dir: join(opts.dir, String(i + 1), "redis"),
    port: opts.redisPorts?.[i],
    persist: opts.persist,
  });
  const token = `${opts.tokenPrefix}-${i + 1}`;
  try {
    const rest = await startUpstashRest({
      redisHost: redis.host,
      redisPort: redis.port,
      token,
      port: opts.restPorts?.[i],
      maxCommandsPerSecond: opts.commandsPerSecond,
    });
    return { redis, rest, env: { url: rest.url, token } };
  } catch (err) {
    await redis.stop().catch(() => {});
    throw err;
  }
}

async function stopShard(s: StackShard): Promise<void> {
  await s.rest.stop().catch(() => {});
  await s.redis.stop().catch(() => {});
}

/** Starts `count` shard databases in parallel; if any fails, stops the others and throws. */
export async function startShards(opts: ShardsOptions): Promise<Shards> {
  if (!validShardCount(opts.count))
    throw new Error(`seckill shards must be an integer from 0 to ${MAX_LOCAL_SHARDS}, got ${opts.count}`);
  // allSettled, not all: a failure must not leave shards still starting behind the stop.
  const results = await Promise.allSettled(Array.from({ length: opts.count }, (_, i) => startShard(opts, i)));
  const shards = results.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
  if (failed) {
    await Promise.all(shards.map(stopShard));
    throw failed.reason;
  }
  let stopped = false;
  return {
    shards,
    env: shardEnv(shards),
    stop: async () => {
      if (stopped) return;
      stopped = true;
      await Promise.all(shards.map(stopShard));
    },
  };
}

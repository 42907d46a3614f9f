/**
 * The local stack: real redis-server and MariaDB, fronted by our protocol-compatible stand-ins
 * for Upstash Redis REST, PlanetScale HTTP and QStash, so the app's production SDKs run unchanged.
 * Optionally N seckill shard databases beside the main Redis (shards.ts), and every dependency a
 * chosen distance away (latency proxies in front of the stand-ins, latency-proxy.ts). Used by
 * `npm run stack`, `npm run dev`, the test preload and the benchmarks.
 */
import mysql from "mysql2/promise";
import { join } from "node:path";
import { startMariadb, startRedis, type Engine, type MariaEngine } from "./engines.ts";
import { startPlanetscaleHttp, type PlanetscaleHttpServer } from "./planetscale-http.ts";
import { startLocalQstash, type LocalQstashServer } from "./qstash/index.ts";
import { startUpstashRest, type UpstashRestServer } from "./upstash-rest.ts";
import { checkDistance, type Distance, type LatencyProxy, startLatencyProxy } from "./latency-proxy.ts";
import { type ReadRegion, startReadRegion } from "./read-region.ts";
import { randomSecret } from "./secrets.ts";
import { MAX_LOCAL_SHARDS, shardEnv, startShards, validShardCount, type StackShard } from "./shards.ts";

export type { StackShard } from "./shards.ts";
export type { ReadRegion } from "./read-region.ts";

/**
 * The QStash SDK's dev-mode credentials (docs/protocols.md §3.8). Using them locally means the SDK's
 * own dev-mode discovery (`GET /v2/keys` on 127.0.0.1:8080) also finds our server.
 */
export const QSTASH_DEV = {
  token: "eyJVc2VySUQiOiJkZWZhdWx0VXNlciIsIlBhc3N3b3JkIjoiZGVmYXVsdFBhc3N3b3JkIn0=",
  currentSigningKey: "sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r",
  nextSigningKey: "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs",
} as const;

export interface StackOptions {
  /** Data directory: redis/ and mariadb/ live below it. */
  dir: string;
  /** Keep Redis data on disk across runs (dev); tests run in memory. */
  persist?: boolean;
  ports?: Partial<Record<"redis" | "mysql" | "rest" | "planetscale" | "qstash", number>>;
  database?: string;
  /** QStash delays and backoffs are multiplied by this (tests: small). */
  qstashTimeScale?: number;
  qstashPollMs?: number;
  redisToken?: string;
  dbUser?: string;
  dbPassword?: string;
  adminToken?: string;
  /**
   * PAYMENT_WEBHOOK_SECRET for the app; default: random per start. src/env.ts has no default for
   * it, so the stack's env is what makes a local app start (and nothing else does).
   */
  paymentWebhookSecret?: string;
  /**
   * SESSION_SECRET for the app (the session-token HMAC key); default: random per start. Like the
   * webhook secret, src/env.ts has no default for it: the stack's env is what makes a local app start.
   */
  sessionSecret?: string;
  /** QStash token and signing keys; default: the SDK's dev-mode values (dev discovery works). */
  qstashKeys?: { token: string; currentSigningKey: string; nextSigningKey: string };
  /** Base URL the app will listen on; becomes PUBLIC_URL (QStash callback destination). */
  publicUrl?: string;
  /**
   * Seckill shard databases to start beside the main Redis (default 0): each its own
   * redis-server (data in `<dir>/shards/<i>/redis`, the main one's flags) behind its own
   * Upstash-REST stand-in and token. With N > 0 the env gains SECKILL_SHARD_URLS and
   * SECKILL_SHARD_TOKENS (comma-separated, shard order); with 0 neither is set.
   */
  seckillShards?: number;
  /** Command-rate cap of each shard's stand-in (commands per second; 0/undefined: none). The main one is never capped. */
  shardCommandsPerSecond?: number;
  /** Preferred ports of the shards' redis-servers and stand-ins, in shard order (missing → free ports). */
  shardPorts?: { redis?: readonly number[]; rest?: readonly number[] };
  /**
   * Every dependency this far from the app: with oneWayMs or jitterMs > 0, a latency proxy in front
   * of each stand-in (main REST, PlanetScale HTTP, QStash, each shard's REST), and the app's settings
   * (UPSTASH_REDIS_REST_URL, DATABASE_URL, QSTASH_URL, SECKILL_SHARD_URLS) name the proxies. The
   * LOCAL_* settings (tools, benches) stay direct. Default: none (the app talks to the stand-ins).
   */
  distance?: Distance;
  /**
   * A read region beside the primary (read-region.ts): a replica redis-server behind its own
   * stand-in, at `distance` (default: near, whatever the stack's distance), refusing a request whose
   * sync token it cannot reach within `maxWaitMs`. The main stand-in then answers with offset sync
   * tokens, and the env gains UPSTASH_REDIS_READ_URL and UPSTASH_REDIS_READ_TOKEN. Default: none.
   */
  readRegion?: { distance?: Distance; maxWaitMs?: number };
  log?: (msg: string) => void;
}

/** The latency proxies of a stack started with a `distance`, in front of the stand-ins. */
export interface StackDistance {
  proxies: { rest: LatencyProxy; planetscale: LatencyProxy; qstash: LatencyProxy; shards: LatencyProxy[] };
  /** The distance in force (all proxies share it). */
  readonly current: Required<Distance>;
  /** Moves every dependency to `distance` at once (calls already held keep their draw). */
  set(distance: Distance): void;
}

export interface Stack {
  /** Connection settings for the app, in the variable names of src/env.ts. */
  env: Record<string, string>;
  redis: Engine;
  mysql: MariaEngine;
  rest: UpstashRestServer;
  planetscale: PlanetscaleHttpServer;
  qstash: LocalQstashServer;
  /**
   * The seckill shard databases, in SECKILL_SHARD_URLS order (empty unless `seckillShards`); a
   * shard's `env.url` is its latency proxy when the stack has a distance.
   */
  shards: StackShard[];
  /** The latency proxies, when started with a distance > 0; stopped by `stop`. */
  distance?: StackDistance;
  /** The read region, when started with `readRegion`. */
  readRegion?: ReadRegion;
  database: string;
  /** Stops everything it started, shards included. */
  stop(): Promise<void>;
}

export async function createDatabase(m: MariaEngine, database: string): Promise<void> {
  const conn = await mysql.createConnection({ host: m.host, port: m.port, user: m.user, password: m.password });
  try {
    await conn.query(`CREATE DATABASE IF NOT EXISTS \`${database}\` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci`);
  } finally {
    await conn.end();
  }
}

/** One latency proxy per stand-in URL, all at `d`; stops those started if one fails. */
function startDistance(
  d: Distance,
  urls: { rest: string; planetscale: string; qstash: string; shards: string[] },
): StackDistance & { stop(): Promise<void> } {
  const all: LatencyProxy[] = [];
  const proxy = (url: string) => {
    const p = startLatencyProxy(url, d);
    all.push(p);
    return p;
  };
  try {
    const proxies = {
      rest: proxy(urls.rest),
      planetscale: proxy(urls.planetscale),
      qstash: proxy(urls.qstash),
      shards: urls.shards.map(proxy),
    };
    return {
      proxies,
      get current() {
        return proxies.rest.distance;
      },
      set(next) {
        checkDistance(next);
        for (const p of all) p.set(next);
      },
      stop: async () => {
        await Promise.all(all.map((p) => p.stop()));
      },
    };
  } catch (err) {
    for (const p of all) void p.stop();
    throw err;
  }
}

export async function startStack(opts: StackOptions): Promise<Stack> {
  const log = opts.log ?? (() => {});
  const database = opts.database ?? "cityhub";
  const redisToken = opts.redisToken ?? "local-redis-token";
  const dbUser = opts.dbUser ?? "cityhub";
  const dbPassword = opts.dbPassword ?? "local-db-password";
  const qkeys = opts.qstashKeys ?? QSTASH_DEV;
  const started: { stop(): Promise<void> }[] = [];
  const stopAll = async () => {
    for (const s of started.reverse()) await s.stop().catch(() => {});
  };
  const shardCount = opts.seckillShards ?? 0;
  if (!validShardCount(shardCount))
    throw new Error(`seckillShards must be an integer from 0 to ${MAX_LOCAL_SHARDS}, got ${shardCount}`);
  const distance = opts.distance && checkDistance(opts.distance);
  const far = distance !== undefined && (distance.oneWayMs > 0 || distance.jitterMs > 0);
  try {
    log(
      shardCount > 0
        ? `starting redis-server, MariaDB and ${shardCount} seckill shard database(s)`
        : "starting redis-server and MariaDB",
    );
    // allSettled: when one engine fails, the others must be registered for the stop, not left running.
    const [redisR, mariaR, shardsR] = await Promise.allSettled([
      startRedis({ dir: join(opts.dir, "redis"), port: opts.ports?.redis, persist: opts.persist }),
      startMariadb({ dir: join(opts.dir, "mariadb"), port: opts.ports?.mysql }),
      startShards({
        count: shardCount,
        dir: join(opts.dir, "shards"),
        persist: opts.persist,
        tokenPrefix: `${redisToken}-shard`,
        commandsPerSecond: opts.shardCommandsPerSecond,
        redisPorts: opts.shardPorts?.redis,
        restPorts: opts.shardPorts?.rest,
      }),
    ]);
    for (const r of [redisR, mariaR, shardsR]) if (r.status === "fulfilled") started.push(r.value);
    if (redisR.status === "rejected") throw redisR.reason;
    if (mariaR.status === "rejected") throw mariaR.reason;
    if (shardsR.status === "rejected") throw shardsR.reason;
    const [redis, maria, shards] = [redisR.value, mariaR.value, shardsR.value];
    await createDatabase(maria, database);

    log("starting the Upstash-REST, PlanetScale-HTTP and QStash stand-ins");
    const [rest, planetscale, qstash] = await Promise.all([
      startUpstashRest({
        redisHost: redis.host,
        redisPort: redis.port,
        token: redisToken,
        port: opts.ports?.rest,
        syncTokens: opts.readRegion ? "offset" : "counter",
      }),
      startPlanetscaleHttp({
        mysql: { host: maria.host, port: maria.port, user: maria.user, password: maria.password },
        database,
        username: dbUser,
        password: dbPassword,
        port: opts.ports?.planetscale,
      }),
      startLocalQstash({
        redisHost: redis.host,
        redisPort: redis.port,
        token: qkeys.token,
        currentSigningKey: qkeys.currentSigningKey,
        nextSigningKey: qkeys.nextSigningKey,
        port: opts.ports?.qstash,
        timeScale: opts.qstashTimeScale,
        pollIntervalMs: opts.qstashPollMs,
      }),
    ]);
    started.push(rest, planetscale, qstash);
    let readRegion: ReadRegion | undefined;
    if (opts.readRegion) {
      log("starting a read region (replica redis-server and its stand-in)");
      readRegion = await startReadRegion({
        primary: redis,
        dir: join(opts.dir, "read-region"),
        token: redisToken,
        distance: opts.readRegion.distance,
        maxWaitMs: opts.readRegion.maxWaitMs,
      });
      started.push(readRegion);
    }

    // Only the app's calls cross the distance: QStash's deliveries to the app (callbacks to
    // PUBLIC_URL) leave the stand-in directly and are not delayed.
    const proxies =
      distance && far
        ? startDistance(distance, {
            rest: rest.url,
            planetscale: planetscale.url,
            qstash: qstash.url,
            shards: shards.shards.map((s) => s.env.url),
          })
        : undefined;
    if (proxies) {
      started.push(proxies);
      log(`dependencies at a distance: ${describeDistance(proxies.current)}, through latency proxies`);
    }
    const stackShards = shards.shards.map((s, i) =>
      proxies ? { ...s, env: { ...s.env, url: (proxies.proxies.shards[i] as LatencyProxy).url } } : s,
    );
    const env: Record<string, string> = {
      UPSTASH_REDIS_REST_URL: proxies?.proxies.rest.url ?? rest.url,
      UPSTASH_REDIS_REST_TOKEN: redisToken,
      DATABASE_URL: proxies?.proxies.planetscale.url ?? planetscale.url,
      QSTASH_URL: proxies?.proxies.qstash.url ?? qstash.url,
      QSTASH_TOKEN: qkeys.token,
      QSTASH_CURRENT_SIGNING_KEY: qkeys.currentSigningKey,
      QSTASH_NEXT_SIGNING_KEY: qkeys.nextSigningKey,
      ADMIN_TOKEN: opts.adminToken ?? "local-admin-token-change-me-0123456789abcdef",
      PUBLIC_URL: opts.publicUrl ?? "http://127.0.0.1:8787",
      PAYMENT_WEBHOOK_SECRET: opts.paymentWebhookSecret ?? randomSecret("whsec_"),
      SESSION_SECRET: opts.sessionSecret ?? randomSecret("sess_"),
      // Raw engine addresses, for tools (redis-cli, mariadb) and benchmarks, not read by the app.
      LOCAL_REDIS_URL: `redis://${redis.host}:${redis.port}`,
      LOCAL_MYSQL_URL: `mysql://${maria.user}@${maria.host}:${maria.port}/${database}`,
      ...shardEnv(stackShards),
      ...readRegion?.env,
    };
    return {
      env,
      redis,
      mysql: maria,
      rest,
      planetscale,
      qstash,
      shards: stackShards,
      distance: proxies,
      readRegion,
      database,
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

/** "40 ms round trip (20 ms each way + 0–5 ms jitter)", for logs and printStack. */
export function describeDistance(d: Required<Distance>): string {
  return `${2 * d.oneWayMs} ms round trip (${d.oneWayMs} ms each way${d.jitterMs > 0 ? ` + 0–${d.jitterMs} ms jitter` : ""})`;
}

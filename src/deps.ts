/**
 * Capabilities a handler may use, built once per isolate/process from validated config.
 *
 * Ports are the production SDKs themselves, typed as the slice the app uses, so tests and the
 * local stack drive exactly the code that ships (against protocol-compatible stand-ins).
 */
import { Client as QstashClient, Receiver } from "@upstash/qstash";
import { Redis } from "@upstash/redis";
import type { Config } from "./env.ts";
import { createLogger, type Logger } from "./log.ts";
import { createSms, type SmsPort } from "./sms/index.ts";
import { type BlobStore, createBlobStore } from "./blob/index.ts";
import { createPaymentProvider, type PaymentProvider } from "./payments/provider.ts";
import { createDbPort, type DbPort } from "./db/transaction.ts";
import { createIsolate, type Isolate } from "./isolate.ts";
import { createResilience, createShardGuard, guardMethods, guardRedis } from "./resilience.ts";
import { type Runtime, runtimes } from "./runtime.ts";

export type RedisPort = Redis;
/**
 * `execute` runs on a fresh session per call; `transaction` pins one session (one MySQL
 * connection) under a whole-transaction deadline and rolls back at once (src/db/transaction.ts).
 */
export type { DbPort } from "./db/transaction.ts";
export type QueuePort = Pick<QstashClient, "publish" | "publishJSON" | "batchJSON">;
/** The QStash dead-letter queue (operators: services/dlq.ts): list, delete, re-drive. */
export type DlqPort = Pick<QstashClient["dlq"], "listMessages" | "delete" | "retry">;
export type SignatureVerifier = Pick<Receiver, "verify">;

export interface Clock {
  /** Wall time, epoch milliseconds. Injected so jobs and expiry logic are testable. */
  now(): number;
}

export interface Deps {
  config: Config;
  redis: RedisPort;
  /**
   * The read region for reads that may be a moment stale (docs/decisions/read-replicas.md: cache
   * entries, feeds, GEO, like marks), through src/redis/read.ts; null without UPSTASH_REDIS_READ_URL
   * (everything reads `redis`). Its requests carry the main client's sync token, so a read after
   * this isolate's write sees it. Never for writes, scripts, or anything that decides (stock,
   * buyers, revocations, locks).
   */
  redisRead: RedisPort | null;
  /**
   * The seckill shard databases (SECKILL_SHARD_URLS), in configured order, each with its
   * own deadline and breaker; empty when none are configured (every voucher in `redis`). Which
   * database a voucher's keys live in: services/seckill/shards.ts.
   */
  seckillShards: RedisPort[];
  db: DbPort;
  queue: QueuePort;
  /** QStash's dead-letter queue, behind the same breaker as `queue`. */
  dlq: DlqPort;
  receiver: SignatureVerifier;
  clock: Clock;
  log: Logger;
  sms: SmsPort;
  payments: PaymentProvider;
  /** Uploaded images (BLOB_STORE: a local folder in dev, S3-compatible such as R2 in production). */
  blobs: BlobStore;
  /** Everything else this isolate remembers between requests (src/isolate.ts). */
  isolate: Isolate;
  /** The runtime the entry declared, and whether requests may share in-flight I/O (src/runtime.ts). */
  runtime: Runtime;
  /**
   * Keeps background work (cache refresh, publishes) alive after the response. The app rebinds
   * this per request to the runtime's ExecutionContext; the value here is the fallback used
   * outside a request (cron on Bun, tests).
   */
  waitUntil(p: Promise<unknown>): void;
}

/**
 * The read-region client: each request carries the primary client's latest sync token (the SDK's
 * `readYourWritesSyncToken`, copied just before the request leaves), so the region answers only
 * once it has what this isolate last wrote or read at the primary. Its own deadline and breaker
 * (the primary's would open on a lagging region); callers fall back to the primary
 * (src/redis/read.ts).
 */
function readRegion(read: Redis, primary: Redis, guard: Parameters<typeof guardRedis>[1]): Redis {
  read.use((req, next) => {
    read.readYourWritesSyncToken = primary.readYourWritesSyncToken;
    return next(req);
  });
  return guardRedis(read, guard);
}

export const systemClock: Clock = { now: () => Date.now() };

export interface DepsOverrides {
  fetch?: typeof fetch;
  clock?: Clock;
  log?: Logger;
  waitUntil?: (p: Promise<unknown>) => void;
  sms?: SmsPort;
  payments?: PaymentProvider;
  blobs?: BlobStore;
  /** Declared by the entry; Bun's rules when absent (tests, scripts). */
  runtime?: Runtime;
}

export function createDeps(config: Config, overrides: DepsOverrides = {}): Deps {
  const log = overrides.log ?? createLogger(config.LOG_LEVEL);
  // Per-dependency timeouts and breakers (src/resilience.ts), hooked in at each SDK's transport.
  const clock = overrides.clock ?? systemClock;
  const runtime = overrides.runtime ?? runtimes.bun;
  const resilience = createResilience(config, () => clock.now());
  // The SDK's default retries network errors ~4 s; a request should fail fast and fall back.
  // Auto-pipelining merges commands issued in the same tick into one request. Where requests must
  // not await each other's I/O (workerd), a merged request would settle one request's promise from
  // another's fetch; there each command goes out on its own request's fetch.
  const redisClient = (url: string, token: string) =>
    new Redis({
      url,
      token,
      retry: config.REDIS_RETRY ? undefined : false,
      enableTelemetry: false,
      enableAutoPipelining: runtime.sharesIo,
    });
  const redis = guardRedis(
    redisClient(config.UPSTASH_REDIS_REST_URL, config.UPSTASH_REDIS_REST_TOKEN),
    resilience.redis,
  );
  const redisRead = config.UPSTASH_REDIS_READ_URL
    ? readRegion(
        redisClient(config.UPSTASH_REDIS_READ_URL, config.UPSTASH_REDIS_READ_TOKEN || config.UPSTASH_REDIS_REST_TOKEN),
        redis,
        createShardGuard(config, () => clock.now()),
      )
    : null;
  const shardTokens = config.SECKILL_SHARD_TOKENS.split(",").map((t) => t.trim());
  const seckillShards = config.SECKILL_SHARD_URLS.split(",")
    .map((u) => u.trim())
    .filter((u) => u !== "")
    .map((url, i) =>
      guardRedis(
        redisClient(url, shardTokens[i] ?? ""),
        createShardGuard(config, () => clock.now()),
      ),
    );
  const db = createDbPort({
    url: config.DATABASE_URL,
    guard: resilience.mysql,
    fetch: overrides.fetch,
    transactionTimeoutMs: config.MYSQL_TRANSACTION_TIMEOUT_MS,
    log,
  });
  // No SDK retries: they would multiply QSTASH_TIMEOUT_MS, and the outbox sweep re-publishes.
  const qstash = new QstashClient({
    baseUrl: config.QSTASH_URL,
    token: config.QSTASH_TOKEN,
    enableTelemetry: false,
    retry: false,
  });
  const queue: QueuePort = guardMethods(qstash, ["publish", "publishJSON", "batchJSON"], resilience.qstash);
  const dlq: DlqPort = guardMethods(qstash.dlq, ["listMessages", "delete", "retry"], resilience.qstash);
  const receiver = new Receiver({
    currentSigningKey: config.QSTASH_CURRENT_SIGNING_KEY,
    nextSigningKey: config.QSTASH_NEXT_SIGNING_KEY,
  });
  const waitUntil =
    overrides.waitUntil ??
    ((p: Promise<unknown>) => {
      p.catch((err: unknown) => log.error("background task failed", { err }));
    });
  const sms = overrides.sms ?? createSms(config, log, resilience.sms.fetch(overrides.fetch));
  const payments =
    overrides.payments ??
    createPaymentProvider(config, log, () => clock.now(), resilience.payments.fetch(overrides.fetch));
  const blobs = overrides.blobs ?? createBlobStore(config, overrides.fetch);
  return {
    config,
    redis,
    redisRead,
    seckillShards,
    db,
    queue,
    dlq,
    receiver,
    clock,
    log,
    sms,
    payments,
    blobs,
    isolate: createIsolate(config, { redis, clock, resilience, runtime }),
    runtime,
    waitUntil,
  };
}

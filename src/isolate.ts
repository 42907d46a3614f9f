/**
 * Everything one isolate (one Worker isolate, one Bun or Deno process) remembers between requests,
 * in one place: built once per isolate by createDeps and reachable as `deps.isolate`. Nothing an
 * isolate remembers hides in module-level maps; a reader sees here what can be stale, for how
 * long, and how big it may grow (each field documents its bound).
 */
import { hotKeyRuleOf } from "./cache/hot.ts";
import { createCaches, type Caches } from "./caches.ts";
import { SaleCounters } from "./services/sale-counters.ts";
import type { Clock, RedisPort } from "./deps.ts";
import type { Config } from "./env.ts";
import { ListingLimiter } from "./http/listing-limit.ts";
import { OperatorAttempts } from "./http/operator-attempts.ts";
import { AddressWindow } from "./http/address-window.ts";
import { Slots } from "./http/slots.ts";
import { IsolateIds } from "./redis/ids.ts";
import type { Resilience } from "./resilience.ts";
import type { Runtime } from "./runtime.ts";
import { ScriptBatcher } from "./redis/script-batch.ts";
import { luaSources, scriptsFor } from "./redis/scripts.ts";
import { createLoginLimiters, type LoginLimiters } from "./services/auth.ts";
import { SeckillAdmission } from "./services/seckill/admission.ts";
import { SeckillMemory } from "./services/seckill/memory.ts";
import type { MoveStats } from "./services/seckill/moves.ts";
import type { RefillGate } from "./services/seckill/reserve.ts";
import { LRUCache } from "lru-cache";
import { OrderGroups } from "./services/seckill/pipeline.ts";
import { LoadShedder } from "./http/shed.ts";
import { createWriteLimiters, UPLOAD_SLOT_MAX_HOLD_MS, type WriteLimiters } from "./services/upload-limits.ts";
import { SessionCache } from "./services/session-cache.ts";
import { UvBatcher } from "./services/uv.ts";
import { createPublicHealthMemo, type PublicHealthMemo } from "./services/health.ts";

export interface Isolate {
  /**
   * The two-level cache modules' L1s, in-flight loads and counters (src/caches.ts): each L1 is a
   * bounded LRU with its module's TTL (seconds to minutes, see the table in docs/architecture.md §7). Hot keys
   * (cache/hot.ts): per-entry read counters inside the L1 entries (no extra entries), the
   * promoted keys per module (≤ HOT_KEY_MAX each, with the TTL HOT_KEY_L1_TTL_MS) and the
   * write-log cursor.
   */
  caches: Caches;
  /**
   * Order-id source (redis/ids.ts): the id block in use and a spare drawn ahead (4,096 ids each,
   * used for at most BLOCK_MAX_AGE_MS), counters. Nothing is leased: an isolate that dies holds
   * nothing, so churn cannot exhaust ids.
   */
  ids: IsolateIds;
  /** Login-code rate limiters (@upstash/ratelimit) with their ephemeral block caches. */
  loginLimiters: LoginLimiters;
  /**
   * Failed operator sign-ins (http/operator-attempts.ts): addresses refused until a time (LRU,
   * 10,000), counted across isolates by a Redis sliding window.
   */
  operatorAttempts: OperatorAttempts;
  /** Memory misses per client address in the current window (http/address-window.ts): LRU of 20,000. */
  missMeter: AddressWindow;
  /** Requests with a body to public routes per client address in the current window (http/address-window.ts): LRU of 20,000. */
  publicBodies: AddressWindow;
  /**
   * The last anonymous /health answer, when it was probed, and the one probe in flight
   * (services/health.ts memoPublicHealth): one small object.
   */
  publicHealth: PublicHealthMemo;
  /** Live console streams open per console session (nonce → count), at most CONSOLE_STREAMS_PER_SESSION each. */
  consoleStreams: Map<string, number>;
  /**
   * Reservations waiting for this turn's shared pipeline (redis/script-batch.ts): at most one event
   * loop turn's worth, sent as one `/pipeline` request of EVALSHAs.
   */
  reserveBatch: ScriptBatcher<[number, number, number]>;
  /** Requests answered by the fast lane (http/fast-lane.ts) before routing, by kind. */
  fastLane: { prepared: number; me: number; seckill: number };
  /**
   * Seckill reservations whose reply was lost, by how the fence settled them
   * (services/seckill/reserve.ts settleLostReply): three counters.
   */
  seckillLostReplies: { reserved: number; buyer: number; fenced: number };
  /**
   * This isolate's side of the order pipeline (services/seckill/pipeline.ts OrderGroups): drain
   * windows already announced, order-index entries waiting for their batched write, writer/closer
   * counters and MySQL lock-conflict counters.
   */
  orderGroups: OrderGroups;
  /**
   * Seckill memory (services/seckill/memory.ts): buyers this isolate gave a unit moments ago
   * (≤ 100,000, trusted ≤ 60 s and ≤ half the payment timeout) and vouchers Redis called sold out
   * within SOLD_OUT_MEMO_MS (≤ 10,000): answered without Redis.
   */
  seckill: SeckillMemory;
  /** Stock moves this isolate made between a sharded voucher's shards (services/seckill/moves.ts): four counters. */
  seckillMoves: MoveStats;
  /**
   * Refill gates of sharded vouchers' home shards ("voucherId:shard" → the refill in flight, units
   * brought so far, units not yet tried for; services/seckill/reserve.ts): LRU of 10,000.
   */
  seckillRefills: LRUCache<string, RefillGate>;
  /**
   * Sessions (services/session-cache.ts): verified tokens → user, at most SESSION_CACHE_MAX (LRU),
   * plus the signing keys imported once. Answered from memory only while the last sync with Redis
   * began less than SESSION_TRUST_MS ago (revocations and first-seen tokens are confirmed within
   * that bound); one background command per SESSION_SYNC_MS renews and confirms them all.
   */
  sessions: SessionCache;
  /**
   * UV counting (services/uv.ts UvBatcher): visitors already counted today (LRU, 50,000) and those
   * waiting for the next flush (≤ 20,000), sent as one PFADD per day key every 2 s at most.
   */
  uv: UvBatcher;
  /**
   * Seckill attempts by voucher and outcome seen by this isolate (routed handler and fast lane), for the
   * console's live view (services/sale-counters.ts): counts and what Redis last confirmed of them, at
   * most 1,000 vouchers; added to a Redis hash per voucher at most every 5 s (one command), so the
   * console reads them summed across isolates.
   */
  saleCounters: SaleCounters;
  /**
   * Listing/search requests per client address in the current and previous window
   * (http/listing-limit.ts): at most LISTING_IP_MAX addresses (LRU); undefined when
   * LISTING_IP_LIMIT is 0.
   */
  listingLimit: ListingLimiter | undefined;
  /**
   * Seckill admission (services/seckill/admission.ts): per voucher, the admission tokens leased for
   * the current second and whether its budget is spent (LRU, 1,000 vouchers; void after their
   * second), and the per-user / per-address rate-limit blocks Redis reported, answered from memory
   * until they end (LRU, 100,000; each at most the limit's window).
   */
  seckillAdmission: SeckillAdmission;
  /**
   * Per-user token buckets for uploads and notes (services/upload-limits.ts, @upstash/ratelimit),
   * each with an ephemeral cache of blocked users (at most 10,000 per bucket, oldest forgotten first).
   */
  writeLimiters: WriteLimiters;
  /**
   * Image uploads being read and stored by this isolate (routes/upload.ts, http/slots.ts): at most
   * UPLOAD_CONCURRENCY start times (a slot held over UPLOAD_SLOT_MAX_HOLD_MS is taken back as
   * abandoned); the next upload is refused (503) before its body is read. Two counters.
   */
  uploadSlots: Slots;
  /**
   * Payment and refund webhooks being settled now (http/slots.ts): at most WEBHOOK_CONCURRENCY
   * start times (each holds a MySQL session for its transaction; one held past twice the
   * transaction deadline is taken back as abandoned), two counters.
   */
  webhooks: Slots;
  /**
   * Per-dependency deadline + circuit breaker (src/resilience.ts): redis, mysql, qstash, sms,
   * payments. Each remembers its breaker state, the last 128 answer times (the adaptive deadline's
   * p99), the calls and failures of its window (10 buckets), the last opening time and failure
   * message, and a few counters: a fixed size. Built by createDeps around the SDK transports;
   * shown by /health.
   */
  resilience: Resilience;
  /**
   * Load at the door (http/shed.ts): requests in flight and their peak, the smoothed event-loop
   * lag (one probe timer at a time), requests refused by reason: a few numbers.
   */
  shed: LoadShedder;
}

/** The clients an isolate's memory is bound to (the same ones Deps carries). */
export interface IsolatePorts {
  redis: RedisPort;
  clock: Clock;
  /** The guards createDeps put around the ports. */
  resilience: Resilience;
  /** Whether requests may join each other's in-flight I/O (src/runtime.ts). */
  runtime: Runtime;
}

export function createIsolate(config: Config, ports: IsolatePorts): Isolate {
  return {
    // A read with a stale L1 copy does not queue behind a Redis whose breaker is not closed.
    caches: createCaches({}, { hot: hotKeyRuleOf(config), degraded: () => ports.resilience.redis.degraded }),
    ids: new IsolateIds(ports.redis, () => ports.clock.now(), { sharesIo: ports.runtime.sharesIo }),
    loginLimiters: createLoginLimiters(config, ports.redis),
    operatorAttempts: new OperatorAttempts(config, ports.redis),
    consoleStreams: new Map<string, number>(),
    publicHealth: createPublicHealthMemo(),
    missMeter: new AddressWindow(config.MISS_PER_ADDRESS, config.MISS_WINDOW_MS),
    publicBodies: new AddressWindow(config.PUBLIC_BODIES_PER_ADDRESS, config.PUBLIC_BODIES_WINDOW_MS),
    fastLane: { prepared: 0, me: 0, seckill: 0 },
    seckillLostReplies: { reserved: 0, buyer: 0, fenced: 0 },
    reserveBatch: new ScriptBatcher(
      luaSources.reserveStock,
      (redis) => scriptsFor(redis).reserveStock,
      ports.runtime.sharesIo,
    ),
    seckill: new SeckillMemory(config),
    seckillMoves: { refills: 0, moves: 0, units: 0, commands: 0 },
    seckillRefills: new LRUCache<string, RefillGate>({ max: 10_000 }),
    orderGroups: new OrderGroups(ports.runtime),
    // Expiry is checked against deps.clock by the reader (untilMs), so the bound holds in wall time.
    sessions: new SessionCache(config),
    uv: new UvBatcher(),
    saleCounters: new SaleCounters(),
    listingLimit: config.LISTING_IP_LIMIT > 0 ? new ListingLimiter(config) : undefined,
    seckillAdmission: new SeckillAdmission(config),
    writeLimiters: createWriteLimiters(config, ports.redis),
    uploadSlots: new Slots(config.UPLOAD_CONCURRENCY, UPLOAD_SLOT_MAX_HOLD_MS),
    webhooks: new Slots(config.WEBHOOK_CONCURRENCY, 2 * config.MYSQL_TRANSACTION_TIMEOUT_MS),
    resilience: ports.resilience,
    shed: new LoadShedder({
      maxInFlight: config.SHED_MAX_IN_FLIGHT,
      maxLagMs: config.SHED_MAX_LAG_MS,
      measureLag: ports.runtime.name !== "workerd",
    }),
  };
}

/**
 * Configuration: the only module that reads raw environment values. Entries hand their raw env
 * (process.env, Workers bindings, Deno.env) to `parseEnv`, which validates once and returns a
 * typed `Config`; nothing else in src/ touches the environment.
 */
import { z } from "zod";

const bool = z
  .union([z.boolean(), z.string()])
  .transform((v) => (typeof v === "boolean" ? v : ["1", "true", "yes", "on"].includes(v.toLowerCase())));

/** Seckill shard databases a deployment may configure (SECKILL_SHARD_URLS). */
export const MAX_SECKILL_SHARDS = 64;

export const EnvSchema = z.object({
  /** Upstash Redis REST endpoint (hosted, or the local stand-in from `npm run stack`). */
  UPSTASH_REDIS_REST_URL: z.url({ protocol: /^https?$/ }),
  /** Token of that endpoint (a secret on Workers). */
  UPSTASH_REDIS_REST_TOKEN: z.string().min(1),
  /**
   * Seckill shards: comma-separated REST URLs of the Redis databases a seckill voucher's
   * stock is sharded across, and their tokens in the same order (a secret on Workers). Unset: every
   * voucher lives in the main database (UPSTASH_REDIS_REST_*). A voucher takes
   * the count configured when it is created; shards may be added later, never removed while a
   * voucher created with them lives.
   */
  SECKILL_SHARD_URLS: z.string().default(""),
  SECKILL_SHARD_TOKENS: z.string().default(""),
  /**
   * A read region of the main database (a replica's REST endpoint): the reads that may be a moment
   * stale go there (docs/decisions/read-replicas.md), with read-your-writes through the sync token
   * of the main client. Unset: every read goes to UPSTASH_REDIS_REST_URL. The token defaults to
   * UPSTASH_REDIS_REST_TOKEN (a region shares its database's token; a secret on Workers).
   */
  UPSTASH_REDIS_READ_URL: z.union([z.literal(""), z.url({ protocol: /^https?$/ })]).default(""),
  UPSTASH_REDIS_READ_TOKEN: z.string().default(""),
  /** PlanetScale connection URL; `http://` is kept as is (local stand-in), anything else means https. */
  DATABASE_URL: z.string().min(1),
  /** QStash API base (hosted, or the local stand-in). */
  QSTASH_URL: z.url({ protocol: /^https?$/ }).default("https://qstash.upstash.io"),
  /** QStash API token: publishing order messages and delayed callbacks (a secret on Workers). */
  QSTASH_TOKEN: z.string().min(1),
  /** Keys that verify the signature of QStash deliveries to /internal/* (current and next, for rotation). */
  QSTASH_CURRENT_SIGNING_KEY: z.string().min(1),
  QSTASH_NEXT_SIGNING_KEY: z.string().min(1),
  /** Operator secret for /admin/* and operator routes (`authorization: Bearer <ADMIN_TOKEN>`). */
  ADMIN_TOKEN: z.string({ error: "ADMIN_TOKEN is required" }).min(32, "ADMIN_TOKEN must be at least 32 characters"),
  /** Failed operator sign-ins allowed per client address per OPERATOR_AUTH_WINDOW_SECONDS (0 = no limit). */
  OPERATOR_AUTH_FAILURES: z.coerce.number().int().min(0).max(10_000).default(20),
  OPERATOR_AUTH_WINDOW_SECONDS: z.coerce.number().int().min(1).max(86_400).default(900),
  /**
   * Public base URL of this deployment, used as the destination of QStash callbacks
   * (`${PUBLIC_URL}/internal/...`). Must be reachable by QStash. Also the console's only accepted
   * Origin for its forms: operators open the console at this address. Required, no default: a
   * loopback default would send every callback of a deployment nowhere while orders pile up. The
   * local tools (npm run dev/stack/worker, the tests) always set it to the app's own address.
   */
  PUBLIC_URL: z.url({
    protocol: /^https?$/,
    error: (iss) =>
      iss.input === undefined
        ? "PUBLIC_URL is required (the deployment's public URL, where QStash delivers callbacks)"
        : "PUBLIC_URL must be an http(s) URL",
  }),
  /** IANA zone for dates in responses, sign-in days and UV days (api.md: default Asia/Shanghai). */
  SERVICE_TIME_ZONE: z.string().default("Asia/Shanghai"),
  /** Lowest level of the one-line JSON logs written. */
  LOG_LEVEL: z.enum(["debug", "info", "warn", "error", "silent"]).default("info"),
  /**
   * Who gets the `Server-Timing` header (the request's trips to Redis, the database and QStash:
   * count and ms, src/util/trips.ts): "all" (default: a developer sees them in the browser's
   * network panel; the counts tell no more than the response's latency already does),
   * "operators" (only requests carrying `Bearer <ADMIN_TOKEN>`), or "off".
   */
  SERVER_TIMING: z.enum(["all", "operators", "off"]).default("all"),
  /** Comma-separated origins allowed by CORS; `*` allows any (the classic front-end runs elsewhere). */
  CORS_ORIGINS: z.string().default("*"),
  /**
   * `Idempotency-Key` (src/http/idempotency.ts): how long a completed request's response is kept
   * for replay, seconds (the IETF draft and Stripe: 24 h). A retry after this runs again.
   */
  IDEMPOTENCY_TTL_SECONDS: z.coerce
    .number()
    .int()
    .min(60)
    .max(7 * 86_400)
    .default(86_400),
  /**
   * The lease of a request that claimed a key and is still running, ms: duplicates get 409 for at
   * most this long. A process that dies mid-request holds the key until the lease ends; a handler
   * running longer than this loses the key (a duplicate may then run, and neither is stored).
   */
  IDEMPOTENCY_LOCK_MS: z.coerce.number().int().min(100).max(600_000).default(60_000),
  /**
   * Largest response body stored for replay, bytes (these routes answer well under 1 KB; the
   * reconcile report grows with the vouchers). A larger one is answered but not stored, and logged.
   */
  IDEMPOTENCY_MAX_RESPONSE_BYTES: z.coerce.number().int().min(1024).max(1_048_576).default(65_536),
  /**
   * New Idempotency-Keys one caller (a user, an operator credential) may claim per clock hour; past
   * it a keyed request is a 429 (replays of keys already held are not counted; a request without a
   * key is unaffected). Each stored key lives IDEMPOTENCY_TTL_SECONDS, so this bounds what one account
   * can make Redis keep: ≤ 24 × this records of ≤ IDEMPOTENCY_MAX_RESPONSE_BYTES. 0 = no quota.
   */
  IDEMPOTENCY_KEYS_PER_HOUR: z.coerce.number().int().min(0).max(1_000_000).default(1_000),
  /** Largest accepted request body, bytes. */
  MAX_BODY_BYTES: z.coerce.number().int().positive().default(1_048_576),
  /** Redis SDK retries network errors ~4 s by default; off by default so health reports fast. */
  REDIS_RETRY: bool.default(false),
  /**
   * Resilience (src/resilience.ts): every call to a dependency runs under a per-isolate deadline and
   * circuit breaker. The deadline follows the dependency's distance: p99 of its recent answer times
   * × DEADLINE_FACTOR, between DEADLINE_FLOOR_MS and the dependency's ceiling below (the ceiling
   * until 8 answers are known, and for a caller that was queued behind answers to other calls).
   * Ceilings, ms per call (the whole HTTP exchange; the SDKs' own retries are off, so this is the
   * longest a caller waits), sized for a dependency one ocean away (RTT 250 ms) under load:
   *   Redis    2 s: ~8 round trips at 250 ms; near, the adaptive deadline is the floor.
   *   MySQL    5 s: the writer's group transactions are the longest calls.
   *   QStash   5 s (the outbox sweep re-publishes what timed out).
   *   SMS, payments   5 s: a provider's API.
   */
  REDIS_TIMEOUT_MS: z.coerce.number().int().min(10).max(60_000).default(2_000),
  /** Deadline ceiling of a MySQL call, ms (see REDIS_TIMEOUT_MS). */
  MYSQL_TIMEOUT_MS: z.coerce.number().int().min(10).max(120_000).default(5_000),
  /**
   * A whole MySQL transaction (BEGIN, its statements, COMMIT), ms (src/db/transaction.ts). When it
   * passes, the statement in flight is abandoned and ROLLBACK sent at once, so no transaction
   * holds its session and row locks past it. 5 s: a settlement's five statements take ~5 round
   * trips (≈ 1.3 s at RTT 250 ms); bounded by PlanetScale's own per-transaction timeout (20 s).
   */
  MYSQL_TRANSACTION_TIMEOUT_MS: z.coerce.number().int().min(50).max(20_000).default(5_000),
  /** Deadline ceiling of a QStash call, ms (see REDIS_TIMEOUT_MS). */
  QSTASH_TIMEOUT_MS: z.coerce.number().int().min(10).max(120_000).default(5_000),
  /** Deadline ceiling of an SMS provider call, ms (see REDIS_TIMEOUT_MS). */
  SMS_TIMEOUT_MS: z.coerce.number().int().min(10).max(120_000).default(5_000),
  /** Deadline ceiling of a payment provider call, ms (see REDIS_TIMEOUT_MS). */
  PAYMENTS_TIMEOUT_MS: z.coerce.number().int().min(10).max(120_000).default(5_000),
  /**
   * Shortest adaptive deadline, ms (capped at each ceiling): how fast a hung dependency that is
   * near is noticed. 250 ms is ~50× a loopback or in-region round trip.
   */
  DEADLINE_FLOOR_MS: z.coerce.number().int().min(10).max(60_000).default(250),
  /** Adaptive deadline = p99 of recent answer times × this (headroom for jitter and bursts). */
  DEADLINE_FACTOR: z.coerce.number().min(1).max(100).default(4),
  /**
   * A breaker opens when, over the last BREAKER_WINDOW_MS, at least BREAKER_MIN_CALLS calls ended
   * and at least BREAKER_FAILURE_RATIO of them failed, or a third of BREAKER_MIN_CALLS failed in a row
   * with no answer between them (network errors, 5xx, deadlines missed with
   * no answer to any call meanwhile; a command or SQL error is an answer, and a deadline missed
   * while we were queued or starved never counts). 10 calls, half failing, in 5 s: a real outage
   * under steady traffic opens it within half the window; a lost packet or a slow burst never does.
   */
  BREAKER_MIN_CALLS: z.coerce.number().int().min(1).max(100_000).default(10),
  BREAKER_FAILURE_RATIO: z.coerce.number().gt(0).max(1).default(0.5),
  BREAKER_WINDOW_MS: z.coerce.number().int().min(100).max(600_000).default(5_000),
  /**
   * An open breaker refuses calls (503 with `Retry-After` = the time left) for this long, ms; then
   * it is half-open: BREAKER_HALF_OPEN_CALLS probes may run at once (others are refused at once),
   * that many successes close it, one failure re-opens it. 5 s: recovery is noticed within
   * seconds, and a dead dependency sees a few probes per 5 s per isolate.
   */
  BREAKER_HALF_OPEN_AFTER_MS: z.coerce.number().int().min(100).max(600_000).default(5_000),
  BREAKER_HALF_OPEN_CALLS: z.coerce.number().int().min(1).max(100).default(3),
  /**
   * Load shedding (src/http/shed.ts): an isolate refuses new requests with 503 + Retry-After 1,
   * before routing, bodies or I/O, while it has this many requests in flight (0 = no bound). 512:
   * well above a sale's 200-connection crowd on one isolate, below where queueing inside the
   * isolate would push every answer past its deadlines.
   */
  SHED_MAX_IN_FLIGHT: z.coerce.number().int().min(0).max(1_000_000).default(512),
  /**
   * ... or while its event loop lags by more than this, ms, smoothed (Bun, Deno; 0 = off). 500 ms:
   * every admitted request would already wait that long for the CPU before its first line ran.
   */
  SHED_MAX_LAG_MS: z.coerce.number().int().min(0).max(60_000).default(500),
  /** Bun entry only: listening port. */
  PORT: z.coerce.number().int().min(0).max(65535).default(8787),
  /**
   * Session idle timeout, seconds (api.md "Auth"). Use renews it in the background, at most once
   * per SESSION_RENEW_SECONDS per session and isolate, so a session idle for this long expires and
   * one used within (TTL − SESSION_RENEW_SECONDS) never does.
   */
  SESSION_TTL_SECONDS: z.coerce.number().int().min(60).default(1800),
  /**
   * HMAC-SHA256 key of the session tokens issued at login (src/services/session.ts). Required,
   * with no default anywhere in src/: whoever knows it can mint a token for any user. The local
   * and test stacks (scripts/stack) generate a random one and hand it to the app in their env.
   */
  SESSION_SECRET: z
    .string({ error: "SESSION_SECRET is required" })
    .min(32, "SESSION_SECRET must be at least 32 characters"),
  /**
   * The key SESSION_SECRET replaced (rotation): tokens it signed are still accepted; new and
   * re-issued tokens are signed with SESSION_SECRET only. Removing it ends the sessions whose token
   * it signed: kept SESSION_MAX_AGE_SECONDS after the rotation, every such token has expired or
   * been re-issued under the new key.
   */
  SESSION_SECRET_PREVIOUS: z.string().min(32, "SESSION_SECRET_PREVIOUS must be at least 32 characters").optional(),
  /**
   * Each isolate's session upkeep runs at most this often, ms: one Redis command (lua/session-sync.lua)
   * that reads the revocations since the last run, renews the sessions due and confirms the sessions
   * the isolate had not seen before (src/services/session-cache.ts).
   */
  SESSION_SYNC_MS: z.coerce.number().int().min(100).max(60_000).default(2_000),
  /**
   * The trust bound, ms: an isolate answers a session from memory only while its last successful
   * upkeep began less than this ago; otherwise the request waits for one. So a logout is honoured
   * everywhere within this bound, and a token an isolate never saw is confirmed within it.
   */
  SESSION_TRUST_MS: z.coerce.number().int().min(200).max(300_000).default(5_000),
  /** A session used in an isolate has its idle timeout renewed by that isolate at most once per this, seconds. */
  SESSION_RENEW_SECONDS: z.coerce.number().int().min(1).default(60),
  /**
   * Sessions (verified tokens, and known-dead ones) one isolate remembers; least recently used go
   * first. A sale's crowd must fit: a buyer pushed out costs a signature check (~10 µs) and a slot in
   * the next background sync again. ~0.5 KB per entry (token, user, session id), so the default
   * holds ~25 MB at most — within a Worker isolate's 128 MB.
   */
  SESSION_CACHE_MAX: z.coerce.number().int().min(1).max(1_000_000).default(50_000),
  /**
   * Accept the unsigned 32-hex tokens issued before signed tokens (looked up in Redis on first use
   * per isolate). Turn off once they have expired: then no malformed token ever costs a Redis call.
   */
  SESSION_LEGACY_TOKENS: bool.default(true),
  /**
   * A signed token's absolute lifetime, seconds (its `exp`): past it the token is refused even while
   * its session slides in Redis. 30 days by default. A request whose token has less than half of
   * this left gets a fresh token for the same session in `X-Session-Token` (later `exp`), up to
   * SESSION_HARD_CAP_SECONDS after the sign-in.
   */
  SESSION_MAX_AGE_SECONDS: z.coerce
    .number()
    .int()
    .min(300)
    .max(366 * 86_400)
    .default(30 * 86_400),
  /**
   * No session outlives its sign-in by more than this, seconds, however often its token is
   * re-issued: then the user signs in again. Default 3 × SESSION_MAX_AGE_SECONDS (90 days);
   * at least SESSION_MAX_AGE_SECONDS (equal to it: tokens are never re-issued).
   */
  SESSION_HARD_CAP_SECONDS: z.coerce
    .number()
    .int()
    .min(300)
    .max(3 * 366 * 86_400)
    .optional(),
  /** Login code lifetime, seconds. */
  LOGIN_CODE_TTL_SECONDS: z.coerce.number().int().min(30).default(120),
  /** Wrong attempts a login code survives; the next wrong one burns it. */
  LOGIN_CODE_MAX_ATTEMPTS: z.coerce.number().int().min(1).default(5),
  /** Minimum spacing of code sends to one phone, seconds (one per this window; 5 per hour on top). */
  LOGIN_CODE_PHONE_INTERVAL_SECONDS: z.coerce.number().int().min(1).default(60),
  /** Code sends allowed per client address per hour. */
  LOGIN_CODE_SENDS_PER_IP_HOUR: z.coerce.number().int().min(1).default(20),
  /** Trust `x-forwarded-for` for the client address (only behind a proxy you run). */
  TRUST_PROXY: bool.default(false),
  /** SMS delivery: `dev` logs the code; `twilio` sends it through Twilio's Messages API. */
  SMS_PROVIDER: z.enum(["dev", "twilio"]).default("dev"),
  /** SMS_PROVIDER=twilio: account SID, auth token (a secret) and sender number. */
  TWILIO_ACCOUNT_SID: z.string().optional(),
  TWILIO_AUTH_TOKEN: z.string().optional(),
  TWILIO_FROM: z.string().optional(),
  /** Twilio API base (overridable for a local test double). */
  TWILIO_API_URL: z.url().default("https://api.twilio.com"),
  /** Seconds an order may stay unpaid before it is closed and its stock released. */
  ORDER_PAY_TIMEOUT_SECONDS: z.coerce.number().int().min(5).default(900),
  /**
   * Purchase-limit rules (`purchaseRules` of a seckill voucher, src/services/seckill/rules.ts):
   * the longest window N a rule may have, days. Also how far back a rule log keeps entries, so
   * lowering it below an existing rule's N shortens that rule's window to this many days.
   */
  PURCHASE_RULE_MAX_DAYS: z.coerce.number().int().min(1).max(3660).default(90),
  /** The largest K ("at most K per user") a purchase-limit rule may have. */
  PURCHASE_RULE_MAX_LIMIT: z.coerce.number().int().min(1).max(10_000).default(100),
  /** Seckill attempts per user per voucher per window (exact sliding window; 0 = off). */
  SECKILL_USER_LIMIT: z.coerce.number().int().min(0).default(5),
  SECKILL_USER_WINDOW_MS: z.coerce.number().int().min(100).default(10_000),
  /**
   * Seckill attempts per client address (IPv6: per LIMIT_IPV6_PREFIX) per voucher per window (0 =
   * off). On a sharded voucher the shards split it (seckill/shards.ts addressLimitIn), so it holds in
   * total: 0 or at least the number of SECKILL_SHARD_URLS.
   */
  SECKILL_IP_LIMIT: z.coerce.number().int().min(0).default(200),
  SECKILL_IP_WINDOW_MS: z.coerce.number().int().min(100).default(10_000),
  /**
   * Redis commands per second the database may take: Upstash caps one database at
   * 10,000/s. The seckill admission limit below is derived from it.
   */
  REDIS_COMMANDS_PER_SECOND: z.coerce.number().int().min(1).default(10_000),
  /**
   * Share of REDIS_COMMANDS_PER_SECOND that seckill attempts (one reserve command each) and their
   * admission leases may use per second, across ALL vouchers on sale at once (0..1). The rest is
   * left for sessions, cache misses, the order pipeline and everything else.
   */
  SECKILL_ADMISSION_SHARE: z.coerce.number().gt(0).max(1).default(0.8),
  /**
   * Seckill attempts per second one voucher may send to Redis, across isolates (the rest get 429
   * + Retry-After from the isolate, with no Redis call). Unset: the whole derived cap
   * (floor(REDIS_COMMANDS_PER_SECOND × SECKILL_ADMISSION_SHARE)), which several vouchers on sale at
   * once share first come first served; set it to cap ÷ N to keep a part for each of N sales.
   * 0 = no admission limit at all.
   */
  SECKILL_ADMISSION_PER_SECOND: z.coerce.number().int().min(0).optional(),
  /**
   * Upload token bucket per user (POST /api/upload/blog): at most UPLOAD_BUCKET_SIZE uploads in a
   * burst, refilled by UPLOAD_BUCKET_REFILL tokens every UPLOAD_BUCKET_INTERVAL_MS (0 size = off).
   * Default: 5 at once, then one per 10 s. Taken before the body is read (routes/upload.ts): a
   * request refused from its headers alone (type, boundary, declared length) costs no token; one
   * whose body is read costs its token whether or not the body holds a valid image.
   */
  UPLOAD_BUCKET_SIZE: z.coerce.number().int().min(0).default(5),
  UPLOAD_BUCKET_REFILL: z.coerce.number().int().min(1).default(1),
  UPLOAD_BUCKET_INTERVAL_MS: z.coerce.number().int().min(100).default(10_000),
  /**
   * Image bytes one user may upload per service day (SERVICE_TIME_ZONE), reserved before the
   * image is stored; 0 = no quota. Default 50 MiB: ten full-size images a day.
   */
  UPLOAD_QUOTA_BYTES_PER_DAY: z.coerce
    .number()
    .int()
    .min(0)
    .default(50 * 1_048_576),
  /**
   * Note token bucket per user (POST /api/blog; each note is pushed to every follower's feed):
   * burst size, refill tokens per interval (0 size = off). Default: 20 at once, then 2 a minute.
   */
  NOTE_BUCKET_SIZE: z.coerce.number().int().min(0).default(20),
  NOTE_BUCKET_REFILL: z.coerce.number().int().min(1).default(1),
  NOTE_BUCKET_INTERVAL_MS: z.coerce.number().int().min(100).default(30_000),
  /**
   * Like and follow toggles per user: a token bucket of this many (0 = off), refilled by
   * TOGGLE_BUCKET_REFILL per TOGGLE_BUCKET_INTERVAL_MS (default: bursts of 30, then one a second).
   * Each toggle is a MySQL write; unmetered, one account made ~1,000 of them a second.
   */
  TOGGLE_BUCKET_SIZE: z.coerce.number().int().min(0).default(30),
  TOGGLE_BUCKET_REFILL: z.coerce.number().int().min(1).default(1),
  TOGGLE_BUCKET_INTERVAL_MS: z.coerce.number().int().min(100).default(1_000),
  /** How long an isolate answers SOLD_OUT from memory after Redis said so, ms (released stock reappears after this). */
  SOLD_OUT_MEMO_MS: z.coerce.number().int().min(0).default(1_000),
  /** Outbox entries older than this are re-published by the sweep, seconds. */
  OUTBOX_REPUBLISH_AFTER_SECONDS: z.coerce.number().int().min(1).default(60),
  /** QStash retries for order messages. */
  ORDER_MESSAGE_RETRIES: z.coerce.number().int().min(0).max(10).default(5),
  /** Reservations per writer group: one claim, one INSERT per voucher, one ack, one close message. */
  ORDER_GROUP_MAX: z.coerce.number().int().min(1).max(2000).default(1000),
  /** One drain delivery stops starting groups after this and hands the rest on, ms. */
  ORDER_DRAIN_BUDGET_MS: z.coerce.number().int().min(100).max(60_000).default(10_000),
  /** A claimed group is not handed to another writer for this long, ms (a crashed writer's group is re-claimed after it). */
  ORDER_CLAIM_LEASE_MS: z.coerce.number().int().min(1000).max(600_000).default(30_000),
  /**
   * A reservation made in the last ORDER_WINDOW_GRACE_MS of its one-second drain window also
   * announces the next window, ms. Why: the window's drain is delivered at its end and its
   * deduplication id is shared by every isolate and the writer's follow-up; a reservation whose
   * outbox entry lands after that delivery (the Redis round trip; an isolate clock a little behind;
   * a Worker's clock, which stands still while the isolate computes) would otherwise be announced
   * under an id already spent and wait for the outbox sweep (a minute or two). Costs no latency and,
   * in a busy sale, no extra message (the next window is announced once either way).
   */
  ORDER_WINDOW_GRACE_MS: z.coerce.number().int().min(0).max(500).default(100),
  /** Payments: `local` is the dev provider that calls our webhook back. */
  PAYMENT_PROVIDER: z.enum(["local"]).default("local"),
  /**
   * HMAC secret of the provider's webhooks. Required, with no default anywhere in src/: whoever
   * knows it can mark payments failed or refunds done. The local stack (scripts/stack) generates a
   * random one and puts it in the env it hands out, so "local" is never recognised here.
   */
  PAYMENT_WEBHOOK_SECRET: z
    .string({ error: "PAYMENT_WEBHOOK_SECRET is required" })
    .min(16, "PAYMENT_WEBHOOK_SECRET must be at least 16 characters"),
  /** Webhooks older than this are rejected (replay protection), seconds. */
  PAYMENT_WEBHOOK_TOLERANCE_SECONDS: z.coerce.number().int().min(1).default(300),
  /**
   * Payment and refund webhooks settled at once per isolate; beyond it a delivery is answered 503
   * + Retry-After before its body is read (the provider retries). Each settlement holds a MySQL
   * session for a transaction, so this stays well below the database's connection pool (64 on the
   * local stand-in; PlanetScale's per-branch limits are higher, shared by every isolate): 8.
   */
  WEBHOOK_CONCURRENCY: z.coerce.number().int().min(1).max(64).default(8),
  /**
   * Failed refunds are retried by the `refund-retry` job after min(max, base · 2^(attempts−1))
   * seconds (jittered down to half); a refund the provider accepted but never reported on is asked
   * again after the max. Seconds.
   */
  PAYMENT_REFUND_RETRY_BASE_SECONDS: z.coerce.number().int().min(1).default(30),
  PAYMENT_REFUND_RETRY_MAX_SECONDS: z.coerce.number().int().min(1).default(3600),
  /** Local provider: delay before it calls back, ms, and the share of payments it declines (0..1). */
  LOCAL_PAYMENT_DELAY_MS: z.coerce.number().int().min(0).default(200),
  LOCAL_PAYMENT_FAIL_RATE: z.coerce.number().min(0).max(1).default(0),
  /** Bun/Deno entries: run the cron jobs in-process (Workers use [triggers]). */
  RUN_CRON: bool.default(true),
  /** Inbox length per user (`feed:{uid}`): pushes keep only this many newest note ids. */
  FEED_MAX_LENGTH: z.coerce.number().int().min(1).max(100_000).default(1000),
  /** Notes per scroll page of GET /api/blog/of/follow (the classic client expects 2). */
  FEED_PAGE_SIZE: z.coerce.number().int().min(1).max(100).default(2),
  /**
   * Hot keys (src/cache/hot.ts): a cached key with at least this many fresh L1 hits within
   * HOT_KEY_WINDOW_MS in one isolate is promoted there to HOT_KEY_L1_TTL_MS; 0 = off.
   */
  HOT_KEY_READS: z.coerce.number().int().min(0).max(1_000_000).default(20),
  /** The hot-key window, ms: a promoted key whose window falls below HOT_KEY_READS is demoted. */
  HOT_KEY_WINDOW_MS: z.coerce.number().int().min(100).max(600_000).default(2_000),
  /**
   * L1 freshness of a promoted key, ms (never below its module's own). A write reaches other
   * isolates' promoted copies through the write log within one cache-metrics flush (5 s), so this
   * bounds staleness only when that flush keeps failing — and a failed flush demotes everything.
   */
  HOT_KEY_L1_TTL_MS: z.coerce.number().int().min(100).max(3_600_000).default(30_000),
  /** Promoted keys per cache module and isolate at most (the rest keep their module's TTL). */
  HOT_KEY_MAX: z.coerce.number().int().min(1).max(100_000).default(1_000),
  /** Promoted keys each isolate reports per flush at most (hottest first) to GET /admin/cache/hot. */
  HOT_KEY_REPORT_TOP: z.coerce.number().int().min(1).max(1_000).default(20),
  /**
   * Per-IP sliding window on the anonymous listing and search routes (src/http/listing-limit.ts):
   * requests per LISTING_IP_WINDOW_MS per client address across those routes and all isolates;
   * 0 = off. Generous on purpose: carrier-grade NAT puts many phones behind one address.
   */
  LISTING_IP_LIMIT: z.coerce.number().int().min(0).max(1_000_000).default(300),
  /** The listing window, ms (epoch-aligned, so every isolate agrees on it). */
  LISTING_IP_WINDOW_MS: z.coerce.number().int().min(1_000).max(3_600_000).default(60_000),
  /** Each isolate sends its listing counts (one Redis command) at most this often, ms: the cross-isolate lag. */
  LISTING_SYNC_MS: z.coerce.number().int().min(100).max(60_000).default(1_000),
  /**
   * Every per-address limit (login-code sends, seckill attempts, listing and search) counts an IPv6
   * caller by this prefix, bits: one customer's subnet (/64 by default; a /56 or /48 where
   * providers hand those out). IPv4 counts per address.
   */
  LIMIT_IPV6_PREFIX: z.coerce.number().int().min(16).max(128).default(64),
  /** Lookups missing the isolate's memory one address may cause per MISS_WINDOW_MS (http/address-window.ts; 0 = off). */
  MISS_PER_ADDRESS: z.coerce.number().int().min(0).max(1_000_000).default(120),
  MISS_WINDOW_MS: z.coerce.number().int().min(100).max(3_600_000).default(10_000),
  /**
   * Requests with a body to public routes (sign-in, send-code) one address may send per
   * PUBLIC_BODIES_WINDOW_MS per isolate, refused (429) before the body is read (http/address-window.ts;
   * 0 = off). Generous: a household behind one NAT signs in a few times a minute, not 60.
   */
  PUBLIC_BODIES_PER_ADDRESS: z.coerce.number().int().min(0).max(1_000_000).default(60),
  PUBLIC_BODIES_WINDOW_MS: z.coerce.number().int().min(100).max(3_600_000).default(60_000),
  /** Client addresses one isolate tracks for the listing limit (LRU, ~150 B each). */
  LISTING_IP_MAX: z.coerce.number().int().min(100).max(1_000_000).default(20_000),
  /** Largest accepted image upload, bytes (the multipart body may exceed it by a little framing). */
  UPLOAD_MAX_BYTES: z.coerce
    .number()
    .int()
    .positive()
    .max(100 * 1_048_576)
    .default(5 * 1_048_576),
  /**
   * Image uploads one isolate reads and stores at once (routes/upload.ts); one more is refused with
   * 503 + Retry-After 1 before its body is read or any Redis call. Each holds up to UPLOAD_MAX_BYTES
   * in memory (about three copies while parsed and stored) and a share of the event loop, so the
   * default 8 bounds uploads to ~120 MiB and keeps them from starving every other request.
   */
  UPLOAD_CONCURRENCY: z.coerce.number().int().min(1).max(1_000).default(8),
  /** Where uploaded images live: `local` = a folder (dev), `s3` = any S3-compatible store (R2, S3, MinIO). */
  BLOB_STORE: z.enum(["local", "s3"]).default("local"),
  /** BLOB_STORE=local: the folder, relative to the working directory unless absolute. */
  UPLOAD_DIR: z.string().min(1).default(".local/uploads"),
  /** BLOB_STORE=s3: endpoint, e.g. `https://<account>.r2.cloudflarestorage.com` or `https://s3.<region>.amazonaws.com`. */
  S3_ENDPOINT: z.url({ protocol: /^https?$/ }).optional(),
  S3_BUCKET: z.string().min(1).optional(),
  /** SigV4 region; R2 uses `auto`. */
  S3_REGION: z.string().min(1).default("auto"),
  /** BLOB_STORE=s3: the access key pair (a secret on Workers). */
  S3_ACCESS_KEY_ID: z.string().min(1).optional(),
  S3_SECRET_ACCESS_KEY: z.string().min(1).optional(),
  /** `true`: `<endpoint>/<bucket>/<key>` (R2, MinIO); `false`: `<bucket>.<endpoint host>/<key>`. */
  S3_PATH_STYLE: bool.default(true),
  /**
   * Subrequests one invocation may make (Cloudflare Workers: every fetch counts — one Redis command
   * or pipeline, each PlanetScale statement including BEGIN and COMMIT, one QStash publish or batch,
   * one provider call — also the ones made from `waitUntil`; past the plan's limit each further
   * fetch throws). Workers Free: 50. Workers Paid: 10,000 on the current limits page, 1,000 before.
   * Unset: 1,000 on workerd (the lower paid figure), no limit on Bun and Deno; set 50 on Free, or the
   * value of wrangler.toml `[limits] subrequests` if you set one. The loops that could outgrow one
   * invocation (the order drain, its close messages, close-expired, refund retry, the outbox sweep,
   * reconcile) plan against this minus a headroom and hand the rest on (src/ports/subrequests.ts).
   */
  WORKERS_SUBREQUEST_LIMIT: z.coerce.number().int().min(20).max(10_000_000).optional(),
});

export type Config = z.infer<typeof EnvSchema>;

/** Cross-field rules that a per-field schema cannot express. */
const RefinedSchema = EnvSchema.superRefine((c, ctx) => {
  const shardUrls = c.SECKILL_SHARD_URLS.split(",").filter((u) => u.trim() !== "");
  const shardTokens = c.SECKILL_SHARD_TOKENS.split(",").filter((u) => u.trim() !== "");
  if (shardUrls.length !== shardTokens.length) {
    ctx.addIssue({
      code: "custom",
      path: ["SECKILL_SHARD_TOKENS"],
      message: `SECKILL_SHARD_TOKENS must name one token per SECKILL_SHARD_URLS entry (${shardUrls.length} URLs, ${shardTokens.length} tokens)`,
    });
  }
  if (shardUrls.length > MAX_SECKILL_SHARDS)
    ctx.addIssue({
      code: "custom",
      path: ["SECKILL_SHARD_URLS"],
      message: `at most ${MAX_SECKILL_SHARDS} seckill shards`,
    });
  // Each shard checks its part of the per-address limit (seckill/shards.ts addressLimitIn): every
  // part must be at least 1, since 0 would mean "no limit" there.
  if (c.SECKILL_IP_LIMIT > 0 && c.SECKILL_IP_LIMIT < shardUrls.length)
    ctx.addIssue({
      code: "custom",
      path: ["SECKILL_IP_LIMIT"],
      message: `SECKILL_IP_LIMIT must be 0 (off) or at least the number of seckill shards (${shardUrls.length}): each shard checks its part of it`,
    });
  for (const u of shardUrls)
    if (!/^https?:\/\/[^\s,]+$/.test(u.trim()))
      ctx.addIssue({
        code: "custom",
        path: ["SECKILL_SHARD_URLS"],
        message: `not an http(s) URL: ${u.trim().slice(0, 80)}`,
      });
  if (c.SESSION_TRUST_MS < 2 * c.SESSION_SYNC_MS) {
    ctx.addIssue({
      code: "custom",
      path: ["SESSION_TRUST_MS"],
      message: "SESSION_TRUST_MS must be at least 2 × SESSION_SYNC_MS (upkeep runs once per SESSION_SYNC_MS)",
    });
  }
  if (c.SESSION_HARD_CAP_SECONDS !== undefined && c.SESSION_HARD_CAP_SECONDS < c.SESSION_MAX_AGE_SECONDS) {
    ctx.addIssue({
      code: "custom",
      path: ["SESSION_HARD_CAP_SECONDS"],
      message: "SESSION_HARD_CAP_SECONDS must be at least SESSION_MAX_AGE_SECONDS (a token never outlives its session)",
    });
  }
  if (c.SESSION_RENEW_SECONDS * 2 > c.SESSION_TTL_SECONDS) {
    ctx.addIssue({
      code: "custom",
      path: ["SESSION_RENEW_SECONDS"],
      message: "SESSION_RENEW_SECONDS must be at most half of SESSION_TTL_SECONDS",
    });
  }
  if (c.BLOB_STORE === "s3") {
    for (const k of ["S3_ENDPOINT", "S3_BUCKET", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY"] as const) {
      if (!c[k]) ctx.addIssue({ code: "custom", path: [k], message: `${k} is required when BLOB_STORE=s3` });
    }
  }
  if (c.SMS_PROVIDER === "twilio") {
    for (const k of ["TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN", "TWILIO_FROM"] as const) {
      if (!c[k]) ctx.addIssue({ code: "custom", path: [k], message: `${k} is required when SMS_PROVIDER=twilio` });
    }
  }
});

export class ConfigError extends Error {
  constructor(readonly issues: string[]) {
    super(`invalid configuration:\n  ${issues.join("\n  ")}`);
    this.name = "ConfigError";
  }
}

/** Validates raw env. Throws `ConfigError` listing every problem (never partial config). */
export function parseEnv(raw: Record<string, unknown>): Config {
  // Workers bindings may include non-string values (KV, services): pass only what the schema knows.
  const picked: Record<string, unknown> = {};
  for (const key of Object.keys(EnvSchema.shape)) {
    const v = raw[key];
    if (v !== undefined && v !== "") picked[key] = v;
  }
  const result = RefinedSchema.safeParse(picked);
  if (!result.success) {
    throw new ConfigError(result.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`));
  }
  return result.data;
}

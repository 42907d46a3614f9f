/**
 * Limits on bursty writes: per-user token buckets for image uploads and notes
 * (@upstash/ratelimit), and a per-user upload quota in bytes per service day.
 *
 * Found by a tester: one account uploaded 12 × 5 MiB images in half a second with no limit (at that
 * rate one user fills a 64 GB disk in about 20 minutes). The bucket bounds the rate (a burst of
 * UPLOAD_BUCKET_SIZE, then UPLOAD_BUCKET_REFILL per UPLOAD_BUCKET_INTERVAL_MS); the quota bounds the
 * bytes whatever the rate (UPLOAD_QUOTA_BYTES_PER_DAY), so one account adds at most that per day.
 *
 * Which writes: uploads and notes (a note fans out to every follower's feed, so a burst of notes is
 * a burst of feed writes). Likes and follows are toggles on one key per pair (idempotent in effect,
 * no storage growth) and comments do not exist yet: not limited here.
 *
 * The quota is hand-written Lua (lua/upload-quota.lua), not a Ratelimit window: it must refuse
 * without counting (a fixed-window `rate` still adds the refused bytes), follow the service day
 * rather than UTC days, and give bytes back when the store fails.
 */
import { Ratelimit } from "@upstash/ratelimit";
import { RATELIMIT_FAIL_CLOSED } from "../resilience.ts";
import type { Deps, RedisPort } from "../deps.ts";
import type { Config } from "../env.ts";
import { keys } from "../redis/keys.ts";
import { scriptsFor } from "../redis/scripts.ts";
import { formatInZone, serviceDay } from "../util/time.ts";

/**
 * A Map that forgets its oldest entry beyond `max` (insertion order). @upstash/ratelimit takes its
 * ephemeral block cache only as a `Map` instance (it checks `instanceof Map`), so an LRUCache
 * cannot stand in; this keeps the cache of blocked users bounded. Forgetting a block early only
 * costs that user's next attempt one Redis call (which blocks them again).
 */
export class BoundedMap<K, V> extends Map<K, V> {
  constructor(private readonly max: number) {
    super();
  }
  override set(key: K, value: V): this {
    if (!this.has(key) && this.size >= this.max) {
      const oldest = this.keys().next();
      if (!oldest.done) this.delete(oldest.value);
    }
    return super.set(key, value);
  }
}

/**
 * Longest an upload holds its slot of UPLOAD_CONCURRENCY before the slot counts as abandoned and
 * is taken back (http/slots.ts), ms: far beyond reading UPLOAD_MAX_BYTES and storing it.
 */
export const UPLOAD_SLOT_MAX_HOLD_MS = 60_000;

/** Blocked users one limiter's ephemeral cache remembers. */
const BLOCK_CACHE_MAX = 10_000;

export interface WriteLimiters {
  /** Null when the bucket is off (size 0). */
  upload: Ratelimit | null;
  note: Ratelimit | null;
  /** Like and follow toggles (one bucket for both). */
  toggle: Ratelimit | null;
}

type LimitConfig = Pick<
  Config,
  | "UPLOAD_BUCKET_SIZE"
  | "UPLOAD_BUCKET_REFILL"
  | "UPLOAD_BUCKET_INTERVAL_MS"
  | "NOTE_BUCKET_SIZE"
  | "NOTE_BUCKET_REFILL"
  | "NOTE_BUCKET_INTERVAL_MS"
  | "TOGGLE_BUCKET_SIZE"
  | "TOGGLE_BUCKET_REFILL"
  | "TOGGLE_BUCKET_INTERVAL_MS"
>;

/**
 * The write buckets, built once per isolate (deps.isolate.writeLimiters). Each keeps an ephemeral
 * cache of users it has seen blocked, so a blocked user is refused without Redis until their next
 * token is due (bounded: BLOCK_CACHE_MAX users per limiter).
 */
export function createWriteLimiters(c: LimitConfig, redis: RedisPort): WriteLimiters {
  const bucket = (size: number, refill: number, intervalMs: number, prefix: string) =>
    size === 0
      ? null
      : new Ratelimit({
          redis,
          analytics: false,
          timeout: RATELIMIT_FAIL_CLOSED,
          ephemeralCache: new BoundedMap<string, number>(BLOCK_CACHE_MAX),
          limiter: Ratelimit.tokenBucket(refill, `${intervalMs} ms`, size),
          prefix,
        });
  return {
    upload: bucket(c.UPLOAD_BUCKET_SIZE, c.UPLOAD_BUCKET_REFILL, c.UPLOAD_BUCKET_INTERVAL_MS, keys.uploadBucket()),
    note: bucket(c.NOTE_BUCKET_SIZE, c.NOTE_BUCKET_REFILL, c.NOTE_BUCKET_INTERVAL_MS, keys.noteBucket()),
    toggle: bucket(c.TOGGLE_BUCKET_SIZE, c.TOGGLE_BUCKET_REFILL, c.TOGGLE_BUCKET_INTERVAL_MS, keys.toggleBucket()),
  };
}

export type Refusal = { reason: "RATE_LIMITED" | "QUOTA_EXCEEDED"; message: string; retryAfterMs: number };

/** Takes one token of the user's `kind` bucket; the refusal when it is empty. */
export async function takeWriteToken(
  deps: Deps,
  kind: keyof WriteLimiters,
  userId: number,
): Promise<Refusal | undefined> {
  const limiter = deps.isolate.writeLimiters[kind];
  if (!limiter) return undefined;
  const res = await limiter.limit(String(userId));
  if (res.success) return undefined;
  // `reset` is on the library's own clock (Date.now), not deps.clock.
  const retryAfterMs = Math.max(1000, res.reset - Date.now());
  return {
    reason: "RATE_LIMITED",
    message: kind === "upload" ? "too many uploads; retry later" : "too many notes; retry later",
    retryAfterMs,
  };
}

/** Ms from `ms` to the next midnight in `zone` (a DST day may make it up to an hour off: a hint). */
export function msToNextServiceDay(ms: number, zone: string): number {
  const [h = 0, m = 0, s = 0] = formatInZone(ms, zone).slice(11).split(":").map(Number);
  return 86_400_000 - ((h * 3600 + m * 60 + s) * 1000 + (ms % 1000));
}

/** Bytes reserved for one upload; `refund` gives them back (once) if the upload does not happen. */
export interface QuotaHold {
  refund(): Promise<void>;
}

/**
 * Reserves `bytes` of the user's quota for today (service zone) before anything is stored: two
 * concurrent uploads never both pass the cap (one script checks and adds). Refused: nothing added.
 */
export async function reserveUploadQuota(deps: Deps, userId: number, bytes: number): Promise<QuotaHold | Refusal> {
  const cap = deps.config.UPLOAD_QUOTA_BYTES_PER_DAY;
  if (cap === 0) return { refund: async () => {} };
  const now = deps.clock.now();
  const key = keys.uploadQuota(userId, serviceDay(now, deps.config.SERVICE_TIME_ZONE));
  // The key outlives its day by one, so a refund just after midnight still finds it.
  const [ok, used] = await scriptsFor(deps.redis).uploadQuota.exec(
    [key],
    [String(bytes), String(cap), String(2 * 86400)],
  );
  if (ok !== 1) return quotaRefusal(deps, now, Number(used), `this file is ${bytes}`);
  let refunded = false;
  return {
    refund: async () => {
      if (refunded) return;
      refunded = true;
      await deps.redis.decrby(key, bytes);
    },
  };
}

function quotaRefusal(deps: Deps, now: number, used: number, what: string): Refusal {
  return {
    reason: "QUOTA_EXCEEDED",
    message: `daily upload quota of ${deps.config.UPLOAD_QUOTA_BYTES_PER_DAY} bytes reached (${used} used today; ${what})`,
    retryAfterMs: msToNextServiceDay(now, deps.config.SERVICE_TIME_ZONE),
  };
}

/**
 * An upload's admission, before a byte of its body is read (routes/upload.ts): takes a token of
 * the user's upload bucket and, in the same round trip, checks that today's quota still has room
 * for `atLeast` bytes — a lower bound of the file's size (the declared body length less the
 * multipart framing allowance; 1 when no length is declared), so it refuses only what the exact
 * reservation after reading (reserveUploadQuota) would refuse too. When both refuse, the quota's
 * refusal is the one answered (it lasts until the next service day).
 *
 * The token is not given back when the upload then fails (an invalid or oversized body, the quota
 * reached, a store error): it meters the uploads we agree to read, and reading up to
 * UPLOAD_MAX_BYTES costs us the same whether the bytes turn out to be an image or not; a refund
 * would make invalid bodies free — the very load the bucket bounds — and cost a Redis command on
 * every failure. A retry carrying an Idempotency-Key takes a token too (its replay is decided
 * once the body is read). Requests refused from their headers alone never get here.
 */
export async function admitUpload(deps: Deps, userId: number, atLeast: number): Promise<Refusal | undefined> {
  const [limited, full] = await Promise.all([takeWriteToken(deps, "upload", userId), quotaFull(deps, userId, atLeast)]);
  return full ?? limited;
}

/** The quota's refusal when fewer than `bytes` remain today (a read only: nothing is reserved). */
async function quotaFull(deps: Deps, userId: number, bytes: number): Promise<Refusal | undefined> {
  const cap = deps.config.UPLOAD_QUOTA_BYTES_PER_DAY;
  if (cap === 0) return undefined;
  const now = deps.clock.now();
  const used = Number(
    (await deps.redis.get<number | string>(keys.uploadQuota(userId, serviceDay(now, deps.config.SERVICE_TIME_ZONE)))) ??
      0,
  );
  return used + bytes <= cap ? undefined : quotaRefusal(deps, now, used, `this upload is at least ${bytes}`);
}

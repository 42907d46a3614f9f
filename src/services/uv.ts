/**
 * Unique visitors per day: one HyperLogLog per calendar day (SERVICE_TIME_ZONE), `uv:{yyyyMMdd}`,
 * ~12 KB at most each, standard error 0.81 % (exact-ish for small counts). A visitor is
 * `u:<user id>` when the request resolved a session, otherwise `a:<sha-256 of the address>` — the
 * limit key, so an IPv6 /64 is one visitor (the raw address never reaches Redis). Not the user
 * agent: a client that rotates it would count as a new visitor per request (measured: +296 from
 * 300 requests); people behind one NAT count once, the undercount a UV count prefers. A range count is PFCOUNT over the days' keys, i.e. the
 * size of their union: someone seen on three days counts once.
 */
import { LRUCache } from "lru-cache";
import type { Deps } from "../deps.ts";
import { keys } from "../redis/keys.ts";
import { formatInZone } from "../util/time.ts";
import { sha256Hex } from "../util/crypto.ts";

/** How long a day's HLL is kept, seconds (a bit over a year, so year-on-year ranges work). */
export const UV_RETENTION_SECONDS = 400 * 24 * 3600;
/** Longest range GET /admin/uv accepts, days. */
export const UV_MAX_RANGE_DAYS = 366;

/** `YYYY-MM-DD` of an instant in `zone`. */
export function isoDay(ms: number, zone: string): string {
  return formatInZone(ms, zone).slice(0, 10);
}

/** `YYYY-MM-DD` → `yyyyMMdd` (the key format). */
const compact = (isoDate: string) => isoDate.replaceAll("-", "");

export type Visitor = { userId: number } | { address: string };

/** The HLL element for a visitor: user id, or a hash of its address (limit key). */
export async function visitorId(v: Visitor): Promise<string> {
  return "userId" in v ? `u:${v.userId}` : `a:${await sha256Hex(v.address)}`;
}

/**
 * Adds visitors to a day (`YYYY-MM-DD`) in one PFADD; with `expire`, the day key's retention is
 * (re)set in the same round trip. PFADD is idempotent, so a repeated visitor costs nothing extra.
 */
export async function recordVisits(
  deps: Pick<Deps, "redis">,
  isoDate: string,
  visitors: readonly string[],
  expire: boolean,
): Promise<void> {
  const key = keys.uv(compact(isoDate));
  const [first, ...rest] = visitors;
  if (first === undefined) return;
  if (!expire) {
    await deps.redis.pfadd(key, first, ...rest);
    return;
  }
  const p = deps.redis.pipeline();
  p.pfadd(key, first, ...rest);
  p.expire(key, UV_RETENTION_SECONDS);
  await p.exec();
}

export interface UvBatcherOptions {
  /** How often an isolate sends its gathered visitors, ms. */
  flushEveryMs: number;
  /** Visitors remembered as already counted today (entries). */
  maxSeen: number;
  /** A batch this large is due at once, and is the most ids one PFADD carries (≈ 66 bytes each). */
  batchSize: number;
  /** Visitors waiting for a flush, at most (a backlog while Redis fails); beyond that new ones are dropped and counted in `dropped`. */
  maxPending: number;
  /** Flushes a batch may fail before it is dropped (and logged). */
  maxAttempts: number;
}

export const defaultUvBatcherOptions: UvBatcherOptions = {
  flushEveryMs: 2_000,
  maxSeen: 50_000,
  batchSize: 5_000,
  maxPending: 20_000,
  maxAttempts: 5,
};

/**
 * This isolate's side of UV counting (deps.isolate.uv): visitors are gathered in memory and sent
 * as **one PFADD per day key per interval** (`flushEveryMs`; one more per `batchSize` new visitors
 * in an extreme burst), not one per visitor. The day key's
 * EXPIRE rides along only on the isolate's first flush of that day (one pipelined round trip), so
 * steady state is exactly one command per interval.
 *
 * Isolate state, and its bounds:
 * - `seen`: visitor-days already queued or sent (hash of `u<id>` / `a<ip>\n<ua>`), LRU of `maxSeen`,
 *   reset when the service day changes — a busy visitor costs nothing after the first request.
 *   A hash collision skips one visitor (a negligible undercount).
 * - `pending`: day → visitors not yet in Redis, at most `maxPending` in all.
 * - a failed flush puts its batch back (retried next interval, at most `maxAttempts` times, then
 *   dropped with an error log) — never lost silently, never unbounded.
 *
 * Flushing is flush-when-due: `maybeFlush` (called after every /api response) starts one through
 * that request's `deps.waitUntil` once the batch's interval has passed (on the injected clock).
 * No timer: a timer parked inside waitUntil would keep every request's background work (and
 * tests' `settle()`) open for a whole interval. The price: an isolate that goes quiet keeps its
 * last batch (≤ one interval of new visitors) until its next request — or loses it if the runtime
 * evicts it first; GET /admin/uv flushes the serving isolate's batch before counting.
 */
export class UvBatcher {
  readonly opts: UvBatcherOptions;
  /** Visitors dropped because `pending` was full or their batch kept failing (since start). */
  dropped = 0;
  private seenDay = "";
  private readonly seen: LRUCache<number, true>;
  private pending = new Map<string, Visitor[]>();
  private pendingCount = 0;
  private attempts = 0;
  /** Day keys whose EXPIRE this isolate already sent. */
  private readonly expired = new Set<string>();
  /** Clock time at which the open batch is due; NaN when nothing is pending. */
  private dueAt = Number.NaN;
  private flushing: Promise<void> | undefined;
  /** dayOf's memo: the UTC minute, zone and day it last computed. */
  private dayMinute = Number.NaN;
  private dayZone = "";
  private dayValue = "";

  constructor(opts: Partial<UvBatcherOptions> = {}) {
    this.opts = { ...defaultUvBatcherOptions, ...opts };
    this.seen = new LRUCache<number, true>({ max: this.opts.maxSeen });
  }

  /**
   * The service-zone day of an instant, remembered for the current UTC minute: zone offsets are whole
   * minutes, so every instant of one UTC minute has the same local day, and a busy isolate formats a
   * date about once a minute instead of once per request.
   */
  dayOf(ms: number, zone: string): string {
    const m = Math.floor(ms / 60_000);
    if (m !== this.dayMinute || zone !== this.dayZone) {
      this.dayValue = isoDay(ms, zone);
      this.dayMinute = m;
      this.dayZone = zone;
    }
    return this.dayValue;
  }

  /** Visitors waiting for the next flush. */
  get size(): number {
    return this.pendingCount;
  }

  /**
   * Queues a visitor for `day` unless already counted today (`seenHash` identifies it). Returns
   * true when queued. Call `maybeFlush` after it.
   */
  add(deps: Pick<Deps, "clock">, day: string, seenHash: number, visitor: Visitor): boolean {
    if (day !== this.seenDay) {
      this.seen.clear();
      this.seenDay = day;
    }
    if (this.seen.has(seenHash)) return false;
    if (this.pendingCount >= this.opts.maxPending) {
      this.dropped++;
      return false;
    }
    this.seen.set(seenHash, true);
    let list = this.pending.get(day);
    if (!list) this.pending.set(day, (list = []));
    list.push(visitor);
    this.pendingCount++;
    if (Number.isNaN(this.dueAt)) this.dueAt = deps.clock.now() + this.opts.flushEveryMs;
    return true;
  }

  /** Starts a background flush when the open batch is due (cheap otherwise: one clock read). */
  maybeFlush(deps: Pick<Deps, "clock" | "waitUntil" | "redis" | "log" | "isolate" | "runtime">): void {
    if (this.flushing || (!(deps.clock.now() >= this.dueAt) && this.pendingCount < this.opts.batchSize)) return;
    // UV counting degrades first (src/resilience.ts): while Redis's breaker is open or probing,
    // the batch waits (bounded by maxPending) and no request's background work touches Redis.
    if (deps.isolate.resilience.redis.degraded) {
      this.dueAt = deps.clock.now() + this.opts.flushEveryMs;
      return;
    }
    deps.waitUntil(this.flush(deps));
  }

  /** Sends everything pending now (one PFADD per day key). Waits for a running flush first. */
  async flush(deps: Pick<Deps, "redis" | "log" | "clock" | "runtime">): Promise<void> {
    // workerd: a running flush is another request's (src/runtime.ts); never await it.
    if (this.flushing && !deps.runtime.sharesIo) return;
    while (this.flushing) await this.flushing;
    if (this.pendingCount === 0) return;
    this.flushing = this.send(deps).finally(() => {
      this.flushing = undefined;
    });
    return await this.flushing;
  }

  private async send(deps: Pick<Deps, "redis" | "log" | "clock">): Promise<void> {
    const batch = this.pending;
    const count = this.pendingCount;
    this.pending = new Map();
    this.pendingCount = 0;
    this.dueAt = Number.NaN;
    try {
      for (const [day, visitors] of batch) {
        const ids = await Promise.all(visitors.map((v) => visitorId(v)));
        const expire = !this.expired.has(day);
        for (let i = 0; i < ids.length; i += this.opts.batchSize)
          await recordVisits(deps, day, ids.slice(i, i + this.opts.batchSize), expire && i === 0);
        if (expire) {
          // Only days seen recently matter (a flush carries today, rarely yesterday).
          if (this.expired.size >= 8) this.expired.clear();
          this.expired.add(day);
        }
        batch.delete(day);
      }
      this.attempts = 0;
    } catch (err) {
      const left = [...batch.values()].reduce((n, l) => n + l.length, 0);
      this.attempts++;
      if (this.attempts >= this.opts.maxAttempts) {
        this.attempts = 0;
        this.dropped += left;
        deps.log.error("uv flush failed; batch dropped", { err, visitors: left, attempts: this.opts.maxAttempts });
        return;
      }
      // Put the unsent days back in front of what arrived meanwhile; retried next interval.
      for (const [day, visitors] of batch) {
        const now = this.pending.get(day);
        this.pending.set(day, now ? [...visitors, ...now] : visitors);
      }
      this.pendingCount += left;
      if (Number.isNaN(this.dueAt)) this.dueAt = deps.clock.now() + this.opts.flushEveryMs;
      deps.log.warn("uv flush failed; retrying next interval", {
        err,
        visitors: left,
        of: count,
        attempt: this.attempts,
      });
    }
  }
}

/** Calendar days from `from` to `to` inclusive (`YYYY-MM-DD`; pure date arithmetic, no zone). */
export function daysBetween(from: string, to: string): string[] {
  const out: string[] = [];
  const end = Date.parse(`${to}T00:00:00Z`);
  for (let t = Date.parse(`${from}T00:00:00Z`); t <= end; t += 86_400_000)
    out.push(new Date(t).toISOString().slice(0, 10));
  return out;
}

export interface UvReport {
  from: string;
  to: string;
  /** Unique visitors per day. */
  days: { date: string; uv: number }[];
  /** Unique visitors over the whole range (union, not sum). */
  total: number;
}

export async function uvReport(deps: Deps, from: string, to: string): Promise<UvReport> {
  // This isolate's gathered visitors first, so an operator sees them at once (others' within an interval).
  await deps.isolate.uv.flush(deps);
  const dates = daysBetween(from, to);
  const dayKeys = dates.map((d) => keys.uv(compact(d)));
  const [first, ...rest] = dayKeys;
  // One pipeline (one request on every runtime; workerd allows six connections per request).
  const p = deps.redis.pipeline();
  for (const k of dayKeys) p.pfcount(k);
  if (first) p.pfcount(first, ...rest);
  const replies = dayKeys.length + (first ? 1 : 0) > 0 ? ((await p.exec()) as number[]) : [];
  const counts = replies.slice(0, dayKeys.length);
  const total = first ? (replies[dayKeys.length] ?? 0) : 0;
  return { from, to, days: dates.map((date, i) => ({ date, uv: Number(counts[i] ?? 0) })), total: Number(total) };
}

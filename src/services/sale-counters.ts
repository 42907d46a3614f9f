/**
 * Seckill attempts per voucher and outcome, for the console's live view, summed across isolates
 * the way the cache counters are (cache/metrics.ts). Each isolate counts in memory (one Map lookup
 * and an increment, no Redis call) on the routed seckill path and in the fast lane, and at most
 * every FLUSH_EVERY_MS adds what it counted since its last flush to one Redis hash per voucher, in
 * the background (`maybeFlush`, after a request, through waitUntil): one command per flush
 * (lua/sale-counts.lua) whatever the number of vouchers, none while nothing was counted.
 *
 * `saleOutcomes` is the read: the hash (every isolate's flushed attempts) plus what this isolate
 * has not flushed yet, so the serving isolate's own attempts show at once and the others' within
 * one flush period of theirs. With Redis down it answers this isolate's counts alone, and says so.
 *
 * A failed flush keeps its deltas for the next one. A flush Redis ran but whose reply was lost is
 * sent again with the next, so those attempts count twice — as with the cache counters: this is a
 * view of the crowd, not a ledger (the orders are). An isolate that receives no request after its
 * last count keeps that last period's counts until it does.
 */
import type { Deps } from "../deps.ts";
import { keys } from "../redis/keys.ts";
import { scriptsFor } from "../redis/scripts.ts";

/** Outcomes of `reserve` as the route answers them. */
export const OUTCOMES = [
  "ok",
  "SOLD_OUT",
  "DUPLICATE_ORDER",
  "RATE_LIMITED",
  "NOT_STARTED",
  "ENDED",
  "NOT_FOUND",
  "LIMIT_REACHED",
  "OUTCOME_UNKNOWN",
] as const;
export type Outcome = (typeof OUTCOMES)[number];
export type OutcomeCounts = Record<Outcome, number>;

/** At most this many vouchers are tracked; the one tracked longest is dropped first (with any unflushed counts). */
export const MAX_TRACKED_VOUCHERS = 1_000;
/** An isolate adds its counts to Redis at most this often, ms (as the cache counters). */
export const FLUSH_EVERY_MS = 5_000;
/** Vouchers one flush sends at most (the rest wait for the next): bounds the script's arguments. */
export const MAX_FLUSH_VOUCHERS = 200;
/** A voucher's summed hash is kept this long after its last flush, ms: past the jobs' registry (7 days after a sale ends). */
export const SALE_COUNTS_TTL_MS = 8 * 86_400_000;

const zero = (): OutcomeCounts => ({
  ok: 0,
  SOLD_OUT: 0,
  DUPLICATE_ORDER: 0,
  RATE_LIMITED: 0,
  NOT_STARTED: 0,
  ENDED: 0,
  NOT_FOUND: 0,
  LIMIT_REACHED: 0,
  OUTCOME_UNKNOWN: 0,
});

interface Tracked {
  /** Since this isolate started. */
  counts: OutcomeCounts;
  /** Of `counts`: what Redis confirmed (the last successful flush's snapshot). */
  flushed: OutcomeCounts;
}

type FlushDeps = Pick<Deps, "redis" | "clock" | "runtime" | "waitUntil" | "log">;

export class SaleCounters {
  private readonly byVoucher = new Map<number, Tracked>();
  /** Vouchers counted since their last successful flush (a subset of byVoucher's keys). */
  private readonly dirty = new Set<number>();
  /** deps.clock ms when the current flush period began (the last background flush, or the first count seen); 0: none yet. */
  private lastFlush = 0;
  private flushing: Promise<void> | undefined;
  /** Reads in flight: a background flush waits for them (see `saleOutcomes`). */
  private reading = 0;

  constructor(private readonly flushEveryMs = FLUSH_EVERY_MS) {}

  count(voucherId: number, outcome: Outcome): void {
    let t = this.byVoucher.get(voucherId);
    if (!t) {
      if (this.byVoucher.size >= MAX_TRACKED_VOUCHERS) {
        const oldest = this.byVoucher.keys().next().value;
        if (oldest !== undefined) {
          this.byVoucher.delete(oldest);
          this.dirty.delete(oldest);
        }
      }
      t = { counts: zero(), flushed: zero() };
      this.byVoucher.set(voucherId, t);
    }
    t.counts[outcome]++;
    this.dirty.add(voucherId);
  }

  /** A copy of a voucher's counts in this isolate since it started (zeros when none). */
  of(voucherId: number): OutcomeCounts {
    const t = this.byVoucher.get(voucherId);
    return t ? { ...t.counts } : zero();
  }

  /** This isolate's counts of a voucher that Redis has not confirmed (a flush in flight's included). */
  unflushed(voucherId: number): OutcomeCounts {
    const t = this.byVoucher.get(voucherId);
    const out = zero();
    if (t) for (const o of OUTCOMES) out[o] = t.counts[o] - t.flushed[o];
    return out;
  }

  /** Vouchers with counts not yet in Redis. */
  get pending(): number {
    return this.dirty.size;
  }

  /**
   * Called after each request: starts a background flush when one is due and something was
   * counted. The first counts start the period rather than flush at once, so a burst's first
   * requests (and a test counting commands) pay for no flush.
   */
  maybeFlush(deps: FlushDeps): void {
    if (this.dirty.size === 0 || this.flushing || this.reading > 0) return;
    const now = deps.clock.now();
    if (this.lastFlush === 0) {
      this.lastFlush = now;
      return;
    }
    if (now - this.lastFlush < this.flushEveryMs) return;
    this.lastFlush = now;
    deps.waitUntil(this.flush(deps).catch((err: unknown) => deps.log.warn("sale counters flush failed", { err })));
  }

  /**
   * Adds this isolate's counts since its last successful flush to Redis: one script call. Rejects
   * when Redis does; the counts then stay pending for the next flush. Waits for a running flush
   * first where requests share I/O; on workerd a running flush is another request's and this call
   * returns at once.
   */
  async flush(deps: Pick<Deps, "redis" | "runtime">): Promise<void> {
    if (this.flushing && !deps.runtime.sharesIo) return;
    while (this.flushing) await this.flushing.catch(() => {});
    this.flushing = this.flushOnce(deps).finally(() => {
      this.flushing = undefined;
    });
    return await this.flushing;
  }

  private async flushOnce(deps: Pick<Deps, "redis">): Promise<void> {
    const sent: { id: number; t: Tracked; snap: OutcomeCounts }[] = [];
    const keyList: string[] = [];
    const args: string[] = [String(SALE_COUNTS_TTL_MS)];
    for (const id of this.dirty) {
      if (sent.length >= MAX_FLUSH_VOUCHERS) break;
      const t = this.byVoucher.get(id);
      if (!t) continue;
      const snap = { ...t.counts };
      // Key index (1-based) of this voucher's hash, then its outcome deltas.
      const k = String(keyList.length + 1);
      for (const o of OUTCOMES) {
        const d = snap[o] - t.flushed[o];
        if (d > 0) args.push(k, o, String(d));
      }
      keyList.push(keys.seckill.counts(id));
      sent.push({ id, t, snap });
    }
    if (sent.length === 0) return;
    await scriptsFor(deps.redis).saleCounts.exec(keyList, args);
    for (const { id, t, snap } of sent) {
      t.flushed = snap;
      // Counted again while the flush ran: still dirty.
      if (attempts(t.counts) === attempts(snap)) this.dirty.delete(id);
    }
  }

  /** Runs `read` with background flushes held off, after a flush in flight (where requests share I/O). */
  async whileReading<T>(deps: Pick<Deps, "runtime">, read: () => Promise<T>): Promise<T> {
    if (this.flushing && deps.runtime.sharesIo) await this.flushing.catch(() => {});
    this.reading++;
    try {
      return await read();
    } finally {
      this.reading--;
    }
  }
}

export interface SaleOutcomes {
  /** Attempts by outcome. */
  counts: OutcomeCounts;
  /** True: summed over every isolate (each up to its last flush; this one's up to now). False: Redis did not answer, this isolate's counts alone. */
  acrossIsolates: boolean;
}

/**
 * A voucher's seckill attempts by outcome across isolates, for the console: one HGETALL, plus this
 * isolate's counts not flushed yet. With Redis unreachable, this isolate's counts (`acrossIsolates`
 * false) rather than an error: the console is most needed during an outage.
 */
export async function saleOutcomes(
  deps: Pick<Deps, "redis" | "runtime" | "isolate">,
  voucherId: number,
): Promise<SaleOutcomes> {
  const c = deps.isolate.saleCounters;
  try {
    // No flush may land between reading the hash and reading what is still unflushed here, or
    // this isolate's share would be counted twice (or not at all) for one tick.
    return await c.whileReading(deps, async () => {
      const raw = await deps.redis.hgetall<Record<string, string | number>>(keys.seckill.counts(voucherId));
      const mine = c.unflushed(voucherId);
      const counts = zero();
      for (const o of OUTCOMES) counts[o] = Number(raw?.[o] ?? 0) + mine[o];
      return { counts, acrossIsolates: true };
    });
  } catch {
    return { counts: c.of(voucherId), acrossIsolates: false };
  }
}

/** Total attempts in a set of counts. */
export function attempts(c: OutcomeCounts): number {
  let n = 0;
  for (const o of OUTCOMES) n += c[o];
  return n;
}

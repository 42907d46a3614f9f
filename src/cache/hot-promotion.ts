/**
 * Hot-key promotion inside one module's L1 (the rule, the write log and the report are in
 * cache/hot.ts).
 *
 * Every L1 entry counts its fresh hits in a window of its own (two fields on the entry, so the
 * count is bounded by the L1 and costs an increment and two compares on the hit path). A key that
 * reaches the rule's reads within a window is promoted: its L1 freshness becomes the rule's longer
 * TTL, counted from when its value was read from L2. The first hit after a window that fell below
 * the rule demotes it back. Writes (`set`/`delete`) append the key to a Redis stream that every
 * isolate reads in its periodic metrics flush; a key named there loses its L1 freshness at once
 * (`invalidate`), so a write reaches a promoted copy within one flush period, not one hot TTL.
 *
 * Write generations: a read captures `gen` before it starts; a value whose read began before a
 * write of its key was seen may be the old one and is never promoted (`readAfterWrites`).
 */
import { LRUCache } from "lru-cache";
import type { HotKeys } from "./hot.ts";
import type { L1Entry, SplitL1 } from "./l1.ts";
import type { CachePolicy } from "./policy.ts";

export class HotPromotion<V, P> {
  /**
   * Promoted keys → reads counted since the last report (hot.ts sends them). At most the hot
   * rule's `maxPromoted` entries: beyond it no key is promoted until one is demoted.
   */
  readonly promoted = new Map<string, number>();
  /** Bumped whenever the write log names keys of this module (see L1Entry.gen). */
  private writeGen = 0;
  /**
   * Keys the write log named → the `writeGen` it was seen at. A value whose read began before
   * (entry.gen < that) may be the old one and is not promoted. At most 10,000 keys; an evicted
   * key's generation moves `allWrittenAt`, which then covers every key (conservative, never lax).
   */
  private readonly writtenAt = new LRUCache<string, number>({
    max: 10_000,
    dispose: (gen, _id, reason) => {
      if (reason === "evict") this.allWrittenAt = Math.max(this.allWrittenAt, gen);
    },
  });
  /** Generation before which no read may promote anything (a failed flush, an evicted `writtenAt`). */
  private allWrittenAt = 0;
  /** The hot rule's reads per window (Infinity: off, so the hit path's compare never matches). */
  private readonly reads: number;
  private readonly windowMs: number;

  constructor(
    private readonly l1: SplitL1<L1Entry<V, P>>,
    private readonly policy: CachePolicy,
    private readonly now: () => number,
    private readonly hot: HotKeys | undefined,
  ) {
    this.reads = hot ? hot.rule.reads : Number.POSITIVE_INFINITY;
    this.windowMs = hot ? hot.rule.windowMs : Number.POSITIVE_INFINITY;
  }

  /** The write generation now: every read captures it before it starts. */
  get gen(): number {
    return this.writeGen;
  }

  /**
   * Hot-key bookkeeping of a fresh L1 hit: counts it, and on the rule's read count or the first
   * hit after the window ended hands over to `tick` (rare: about once per window per key).
   * False when the entry is not fresh, or `tick` just demoted it past its freshness.
   */
  isFreshHit(id: string, e: L1Entry<V, P>): boolean {
    const now = this.now();
    if (e.freshUntil <= now) return false;
    if (++e.reads === this.reads || now >= e.windowEnd) {
      this.tick(id, e, now);
      return e.freshUntil > now;
    }
    return true;
  }

  /**
   * The entry that stores `value` (read at generation `gen`) in place of `prev`. Its hot-key state
   * carries over (a promoted key stays promoted across its refreshes) unless a write was seen
   * since the read began.
   */
  entry(
    id: string,
    prev: L1Entry<V, P> | undefined,
    value: V | null,
    prepared: P | undefined,
    gen: number,
  ): L1Entry<V, P> {
    const now = this.now();
    const promoted = prev?.promoted === true && this.readAfterWrites(id, gen);
    if (prev?.promoted && !promoted) this.promoted.delete(id);
    return {
      value,
      freshUntil: now + this.ttlOf(value, promoted),
      prepared,
      storedAt: now,
      reads: prev ? prev.reads : 0,
      windowEnd: prev ? prev.windowEnd : now + this.windowMs,
      promoted,
      gen,
    };
  }

  /** The key left L1 (delete): no longer promoted. */
  forget(id: string): void {
    this.promoted.delete(id);
  }

  /**
   * The write log named these keys (another isolate, or this one, wrote them): their L1 copies
   * stop being fresh now (the value stays as a fallback), and reads already under way when the
   * write was seen cannot promote what they bring back (`writeGen`).
   */
  invalidate(ids: Iterable<string>): void {
    const gen = ++this.writeGen;
    for (const id of ids) {
      this.writtenAt.set(id, gen);
      const e = this.l1.peek(id);
      if (!e) continue;
      e.promoted = false;
      e.freshUntil = 0;
      this.promoted.delete(id);
    }
  }

  /** Demotes every promoted key (the write log could not be read, so a write may be unseen). */
  demoteAll(): void {
    this.allWrittenAt = ++this.writeGen;
    for (const id of this.promoted.keys()) {
      const e = this.l1.peek(id);
      if (e) this.demote(id, e);
    }
    this.promoted.clear();
  }

  /** Promoted keys with the reads counted since the last call (reset to 0), for the cross-isolate report. */
  takeReport(): { id: string; reads: number }[] {
    const out: { id: string; reads: number }[] = [];
    for (const [id, reads] of this.promoted) {
      if (!this.l1.has(id)) {
        // Evicted from the LRU (or expired past its retention): no longer promoted anywhere.
        this.promoted.delete(id);
        continue;
      }
      if (reads > 0) out.push({ id, reads });
      this.promoted.set(id, 0);
    }
    return out;
  }

  /** The keys promoted in this isolate now. */
  promotedKeys(): string[] {
    return [...this.promoted.keys()].filter((id) => this.l1.peek(id)?.promoted === true);
  }

  /** Rolls the entry's window (demoting a key that fell below the rule) and promotes a key that reached it. */
  private tick(id: string, e: L1Entry<V, P>, now: number): void {
    const hot = this.hot;
    if (!hot) return;
    if (now >= e.windowEnd) {
      // This hit is the first after the window: the window held reads − 1.
      const last = e.reads - 1;
      e.reads = 1;
      e.windowEnd = now + this.windowMs;
      if (e.promoted) {
        if (last >= this.reads) this.promoted.set(id, (this.promoted.get(id) ?? 0) + last);
        else this.demote(id, e);
      }
    }
    if (
      !e.promoted &&
      e.reads >= this.reads &&
      hot.ready &&
      this.readAfterWrites(id, e.gen) &&
      this.promoted.size < hot.rule.maxPromoted
    ) {
      e.promoted = true;
      e.freshUntil = Math.max(e.freshUntil, e.storedAt + this.ttlOf(e.value, true));
      this.promoted.set(id, (this.promoted.get(id) ?? 0) + e.reads);
    }
  }

  /** Back to the module's own L1 TTL (counted from when the value was stored). */
  private demote(id: string, e: L1Entry<V, P>): void {
    e.promoted = false;
    e.freshUntil = Math.min(e.freshUntil, e.storedAt + this.ttlOf(e.value, false));
    this.promoted.delete(id);
  }

  /** L1 freshness of a value, ms: the module's, or the hot rule's for a promoted key (never shorter); nulls capped by nullTtlSeconds. */
  private ttlOf(value: V | null, promoted: boolean): number {
    const base = promoted && this.hot ? Math.max(this.policy.l1TtlMs, this.hot.rule.l1TtlMs) : this.policy.l1TtlMs;
    return value === null ? Math.min(base, this.policy.nullTtlSeconds * 1000) : base;
  }

  /** Whether a read that began at generation `gen` began after every write the log named for `id`. */
  private readAfterWrites(id: string, gen: number): boolean {
    return gen >= this.allWrittenAt && gen >= (this.writtenAt.get(id) ?? 0);
  }
}

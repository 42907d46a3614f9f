/**
 * A module's L1: bounded per-isolate LRUs (lru-cache) of entries that know their own freshness.
 */
import { LRUCache } from "lru-cache";
import type { CachePolicy } from "./policy.ts";

export interface L1Entry<V, P> {
  value: V | null;
  /**
   * Until when this isolate may serve it without asking L2, epoch ms (L1 clock); until
   * `freshUntil + l1StaleMs` it may serve it while refreshing. 0: the write log named the key.
   */
  freshUntil: number;
  /** def.prepare(value), computed when the entry was stored. */
  prepared: P | undefined;
  /** When the value was stored (read from L2/origin or written), epoch ms: TTLs count from here. */
  storedAt: number;
  /** Fresh L1 hits in the current hot-key window (carried over when the value is replaced). */
  reads: number;
  /** End of the current hot-key window, epoch ms (Infinity: hot keys off). */
  windowEnd: number;
  /** Promoted: served with the hot rule's L1 TTL (listed in HotPromotion.promoted). */
  promoted: boolean;
  /**
   * The module's write generation when the read that produced this value began: an entry whose
   * read began before a write of its key was seen in the write log may hold the old value and is
   * never promoted (HotPromotion.readAfterWrites).
   */
  gen: number;
}

/** Known-missing keys one module's L1 remembers, apart from its values. */
export const NULL_L1_MAX = 1_000;

/**
 * The L1 of a module with `policy`. Entries are kept past their freshness (ttl = 10× plus a floor,
 * and at least the stale window) so a MySQL outage can still be answered with the last value this
 * isolate saw; `freshUntil` decides what is fresh, `freshUntil + l1StaleMs` what may be served stale.
 */
export function createL1<V, P>(policy: Pick<CachePolicy, "l1Max" | "l1TtlMs" | "l1StaleMs">): SplitL1<L1Entry<V, P>> {
  const ttl = Math.max(policy.l1TtlMs * 10, 60_000, policy.l1TtlMs + policy.l1StaleMs);
  return new SplitL1<L1Entry<V, P>>(
    new LRUCache<string, L1Entry<V, P>>({ max: policy.l1Max, ttl, ttlAutopurge: false }),
    new LRUCache<string, L1Entry<V, P>>({ max: NULL_L1_MAX, ttl, ttlAutopurge: false }),
  );
}

/**
 * A module's L1 in two LRUs: values, and known-missing keys (`value === null`). A caller probing
 * random ids (unknown shop and voucher ids) fills only the second, so it can never evict
 * a live entry — a sale's config, a hot shop — from the first. The interface is the slice of
 * LRUCache the module uses; a key lives in at most one of the two.
 */
export class SplitL1<E extends { value: unknown }> {
  constructor(
    private readonly live: LRUCache<string, E>,
    private readonly missing: LRUCache<string, E>,
  ) {}
  get(id: string): E | undefined {
    return this.live.get(id) ?? this.missing.get(id);
  }
  peek(id: string): E | undefined {
    return this.live.peek(id) ?? this.missing.peek(id);
  }
  has(id: string): boolean {
    return this.live.has(id) || this.missing.has(id);
  }
  set(id: string, e: E): void {
    if (e.value === null) {
      this.live.delete(id);
      this.missing.set(id, e);
    } else {
      this.missing.delete(id);
      this.live.set(id, e);
    }
  }
  delete(id: string): void {
    this.live.delete(id);
    this.missing.delete(id);
  }
  clear(): void {
    this.live.clear();
    this.missing.clear();
  }
  /** Entries held (values and known-missing). */
  get size(): number {
    return this.live.size + this.missing.size;
  }
}

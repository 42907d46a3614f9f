/**
 * Two-level cache modules: L1 = a bounded per-isolate LRU (l1.ts), L2 = Redis, origin = the
 * module's loader (tiers.ts), hot keys promoted in L1 (hot-promotion.ts, hot.ts).
 *
 * A module is declared once (name, loader, policy: policy.ts) by the composition root
 * (src/caches.ts) and then only `get`/`serve`/`set`/`delete`d. The cache knows no domain: loaders,
 * the prepared response and the "Redis is degraded" signal are handed in. What this glue adds on
 * top of lru-cache, and why it is hand-written: no library combines an isolate-local LRU with a
 * Redis tier, per-key single-flight, a cross-isolate rebuild lock, logical expiry with background
 * refresh through the runtime's `waitUntil`, null caching and fallbacks.
 *
 * Here: the L1 hit path, the stale window (a value past its L1 freshness but within
 * `l1StaleMs` is answered from memory while one background refresh per key runs: Tiers.refreshStale),
 * single-flight — concurrent misses for one key in one isolate share one load where the runtime
 * lets requests share I/O — and the write path (MySQL first, then this overwrites L2 and L1 and
 * names the key on the write log).
 */
import type { Deps } from "../deps.ts";
import { keys } from "../redis/keys.ts";
import type { HotKeys } from "./hot.ts";
import { HotPromotion } from "./hot-promotion.ts";
import { createL1, type L1Entry, type SplitL1 } from "./l1.ts";
import {
  type CacheCounters,
  type CacheModuleDef,
  type CachePolicy,
  type CacheResult,
  defaultPolicy,
  emptyCounters,
} from "./policy.ts";
import { Tiers } from "./tiers.ts";

export {
  type CacheCounters,
  type CacheModuleDef,
  type CachePolicy,
  type CacheResult,
  type CacheStrategy,
  CacheUnavailableError,
  defaultPolicy,
  emptyCounters,
} from "./policy.ts";

/** What a module needs from its isolate besides its declaration (handed in by the composition root). */
export interface CacheWiring {
  /** The L1 clock, epoch ms (tests). Default Date.now. */
  now?: () => number;
  /** The isolate's hot-key state (cache/hot.ts); absent: hot keys off. */
  hot?: HotKeys;
  /**
   * True while Redis answers badly (its breaker open or probing: src/resilience.ts): a read with a
   * stale L1 copy serves it at once and refreshes from origin in the background. Default: never.
   */
  degraded?: () => boolean;
}

const never = () => false;

/** One module's runtime in one isolate. Build with `createCacheModule` once per isolate. */
export class CacheModule<K extends string | number, V, P = never> {
  readonly name: string;
  readonly policy: CachePolicy;
  /** Counters since this isolate started (metrics.ts flushes deltas to Redis). */
  readonly counters: CacheCounters = emptyCounters();
  /** Promoted keys → reads since the last report (HotPromotion.promoted). */
  readonly promoted: ReadonlyMap<string, number>;
  private readonly l1: SplitL1<L1Entry<V, P>>;
  private readonly inflight = new Map<string, Promise<V | null>>();
  private readonly promotion: HotPromotion<V, P>;
  private readonly tiers: Tiers<K, V, P>;
  private readonly now: () => number;
  private readonly hot: HotKeys | undefined;
  private readonly degraded: () => boolean;

  constructor(
    private readonly def: CacheModuleDef<K, V, P>,
    wiring: CacheWiring = {},
  ) {
    this.name = def.name;
    this.policy = { ...defaultPolicy, ...def.policy };
    this.now = wiring.now ?? Date.now;
    this.hot = wiring.hot;
    this.degraded = wiring.degraded ?? never;
    this.l1 = createL1<V, P>(this.policy);
    this.promotion = new HotPromotion(this.l1, this.policy, this.now, this.hot);
    this.promoted = this.promotion.promoted;
    this.tiers = new Tiers(def, this.policy, this.counters, this.now, {
      gen: () => this.promotion.gen,
      remember: (id, value, gen) => this.remember(id, value, gen),
    });
  }

  l2Key(key: K): string {
    return this.tiers.l2Key(key);
  }

  /** Reads through L1 → L2 → origin according to the module's strategy. */
  async get(deps: Deps, key: K): Promise<CacheResult<V>> {
    const id = String(key);
    const cached = this.l1.get(id);
    if (cached && this.promotion.isFreshHit(id, cached)) return this.hit(cached).value;
    if (cached && this.servableStale(cached)) {
      // From memory now; one refresh per key runs behind (Redis degraded: from origin).
      if (this.degraded()) return this.tiers.staleWhileRedisDown(deps, key, cached.value);
      this.tiers.refreshStale(deps, key, cached.value);
      return cached.value;
    }
    // Concurrent misses of one key share one load where requests may share in-flight I/O; on
    // workerd each request loads for itself (src/runtime.ts) — a `mutex` module still collapses
    // the origin loads across requests through its Redis lock, and what a load brings back lands
    // in L1 for every later request.
    const shared = deps.runtime.sharesIo;
    const running = shared ? this.inflight.get(id) : undefined;
    if (running) return await running;
    if (cached && this.degraded()) return this.tiers.staleWhileRedisDown(deps, key, cached.value);
    if (!shared) return await this.tiers.read(deps, key, cached?.value);
    const p = this.tiers.read(deps, key, cached?.value).finally(() => this.inflight.delete(id));
    this.inflight.set(id, p);
    return await p;
  }

  /**
   * The prepared response for `key` (def.prepare). A fresh L1 hit returns it synchronously — no
   * promise, no serialization: it was prepared when the value entered L1. Anything else takes
   * `get`'s path and returns the entry it stored (or, for a stale serve that did not enter L1,
   * prepares one on the spot).
   */
  serve(deps: Deps, key: K, onSlowValue?: (value: V | null) => void): P | Promise<P> {
    const fresh = this.peekFresh(key);
    return fresh !== undefined ? fresh : this.serveSlow(deps, key, onSlowValue);
  }

  /** Would a read of `key` be answered from L1 right now (fresh, or in its stale window)? No counter, no recency, no hot-key tick. */
  inMemory(key: K): boolean {
    const e = this.l1.peek(String(key));
    return e !== undefined && (e.freshUntil > this.now() || this.servableStale(e));
  }

  /** A fresh L1 hit's prepared response (counted as a hit), or undefined: no load is started. */
  peekFresh(key: K): P | undefined {
    const id = String(key);
    const cached = this.l1.get(id);
    if (!cached || cached.prepared === undefined || !this.promotion.isFreshHit(id, cached)) return undefined;
    return this.hit(cached).prepared;
  }

  /** Write path: the caller wrote MySQL first; this overwrites (not deletes) L2 and L1. */
  async set(deps: Deps, key: K, value: V | null): Promise<void> {
    // A value may be a new id above the module's ceiling: its bucket's copy goes (read again on a miss).
    const dropCeiling = value !== null && this.def.ceiling !== undefined;
    if (this.hot || dropCeiling) {
      // One request: the L2 write, then the write-log entry that makes other isolates drop their
      // (possibly promoted) copies. In this order, so an isolate that reacts to the log re-reads
      // the new value.
      const p = deps.redis.pipeline();
      const [k, json, opts] = this.tiers.l2Write(key, value);
      p.set(k, json, opts);
      if (dropCeiling) p.del(keys.cacheCeiling(this.name, key));
      this.hot?.logWrite(p, this.name, String(key));
      await p.exec();
    } else {
      await this.tiers.writeL2(deps.redis, key, value);
    }
    this.remember(String(key), value, this.promotion.gen);
  }

  /** Drops the entry everywhere this isolate can reach (other isolates' L1 ages out, or drop it on the write log). */
  async delete(deps: Deps, key: K): Promise<void> {
    this.l1.delete(String(key));
    this.promotion.forget(String(key));
    if (this.hot) {
      const p = deps.redis.pipeline();
      p.del(this.l2Key(key));
      this.hot.logWrite(p, this.name, String(key));
      await p.exec();
    } else {
      await deps.redis.del(this.l2Key(key));
    }
  }

  /** The write log named these keys: their L1 copies stop being fresh (HotPromotion.invalidate). */
  invalidate(ids: Iterable<string>): void {
    this.promotion.invalidate(ids);
  }

  /** Demotes every promoted key (the write log could not be read, so a write may be unseen). */
  demoteAll(): void {
    this.promotion.demoteAll();
  }

  /** Promoted keys with the reads counted since the last call (reset to 0), for the cross-isolate report. */
  takeReport(): { id: string; reads: number }[] {
    return this.promotion.takeReport();
  }

  /** The keys promoted in this isolate now. */
  promotedKeys(): string[] {
    return this.promotion.promotedKeys();
  }

  /** Whether `key` is promoted in this isolate (tests, the operator view). */
  isPromoted(key: K): boolean {
    return this.l1.peek(String(key))?.promoted === true;
  }

  /** Forget this isolate's L1 (tests; a deploy-time cache flush). */
  clearL1(): void {
    this.l1.clear();
  }

  /**
   * Past its freshness but inside the stale window: a value (a known-missing id is never served
   * stale, so a create shows within its L1 TTL) not named by the write log since (freshUntil 0).
   */
  private servableStale(e: L1Entry<V, P>): boolean {
    return e.value !== null && e.freshUntil > 0 && this.now() < e.freshUntil + this.policy.l1StaleMs;
  }

  /** Counts a fresh L1 hit. */
  private hit(e: L1Entry<V, P>): L1Entry<V, P> {
    this.counters.l1Hits++;
    if (e.value === null) this.counters.nullHits++;
    return e;
  }

  /** `onSlowValue`: told the value this read found (the caller meters what memory could not answer). */
  private async serveSlow(deps: Deps, key: K, onSlowValue?: (value: V | null) => void): Promise<P> {
    const prepare = this.def.prepare;
    if (!prepare) throw new Error(`cache module ${this.name} has no prepare()`);
    const value = await this.get(deps, key);
    onSlowValue?.(value);
    const entry = this.l1.peek(String(key));
    if (entry && entry.value === value && entry.prepared !== undefined) return entry.prepared;
    return prepare(value);
  }

  /** Stores a value in L1, read at generation `gen` (its hot-key state: HotPromotion.entry). */
  private remember(id: string, value: V | null, gen: number): void {
    this.l1.set(id, this.promotion.entry(id, this.l1.peek(id), value, this.def.prepare?.(value), gen));
  }
}

export function createCacheModule<K extends string | number, V, P = never>(
  def: CacheModuleDef<K, V, P>,
  wiring: CacheWiring = {},
): CacheModule<K, V, P> {
  return new CacheModule(def, wiring);
}

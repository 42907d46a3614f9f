/**
 * Two-level cache modules: L1 = a bounded per-isolate LRU (lru-cache), L2 = Redis, origin = MySQL.
 *
 * A module is declared once (namespace, loader, policy) and then only `get`/`set`/`delete`d.
 * What this glue adds on top of lru-cache, and why it is hand-written: no library combines an
 * isolate-local LRU with a Redis tier, per-key single-flight, a cross-isolate rebuild lock, logical
 * expiry with background refresh through the runtime's `waitUntil`, null caching and fallbacks.
 *
 * Strategies (per module):
 * - `plain`   L2 entries carry a Redis TTL (jittered); a miss loads from origin.
 * - `mutex`   on an L2 miss one caller (across isolates) rebuilds under a Redis lock; the others
 *             wait briefly and re-read L2, then load themselves only if the wait ran out.
 * - `logical` L2 entries carry their own expiry and no (short) Redis TTL; an expired entry is
 *             served at once ("stale") while exactly one background rebuild, under the lock,
 *             refreshes it. Hot keys therefore never stampede MySQL and never block on it.
 * Everywhere: concurrent misses for one key in one isolate share one load (single-flight);
 * known-missing ids are cached as null for `nullTtlSeconds`; a Redis failure falls through to
 * MySQL; a MySQL failure serves the stale L1/L2 value if there is one.
 *
 * L2 value format (JSON): `{"v": version, "d": data | null, "x"?: logicalExpiryEpochMs}`. Entries of
 * another version are misses, so bumping `version` retires every entry without a scan.
 *
 * Hot keys (cache/hot.ts, when a rule is installed): every L1 entry counts its fresh hits in a
 * window of its own (two fields on the entry, so the count is bounded by the L1 and costs an
 * increment and two compares on the hit path). A key that reaches the rule's reads within a window
 * is promoted: its L1 freshness becomes the rule's longer TTL, counted from when its value was
 * read from L2. The first hit after a window that fell below the rule demotes it back. Writes
 * (`set`/`delete`) append the key to a Redis stream that every isolate reads in its periodic
 * metrics flush; a key named there loses its L1 freshness at once, so a write reaches a promoted
 * copy within one flush period, not one hot TTL.
 */
import { LRUCache } from "lru-cache";
import type { Deps, RedisPort } from "../deps.ts";
import { keys } from "../redis/keys.ts";
import { type LockHandle, lockHandle, tryLock } from "../redis/lock.ts";
import { scriptsFor } from "../redis/scripts.ts";
import type { HotKeys } from "./hot.ts";

export type CacheStrategy = "plain" | "mutex" | "logical";

export interface CachePolicy {
  strategy: CacheStrategy;
  /** Bump to retire every stored entry of the module. */
  version: number;
  /** L2 freshness, seconds: the Redis TTL (plain/mutex) or the logical expiry (logical). */
  l2TtlSeconds: number;
  /** ± fraction applied to L2 TTLs so keys written together do not expire together (0.1 = ±10 %). */
  jitter: number;
  /** L1 freshness, milliseconds. Bounds how stale another isolate's write can look here. */
  l1TtlMs: number;
  /** L1 capacity, entries. */
  l1Max: number;
  /** How long a known-missing id is remembered, seconds (L2; L1 uses min(l1TtlMs, this)). */
  nullTtlSeconds: number;
  /** mutex/logical: rebuild lock lifetime, milliseconds (> a slow origin load). */
  lockTtlMs: number;
  /** mutex: how long losers wait for the winner's L2 write before loading themselves, ms. */
  waitMs: number;
  /** logical: physical Redis TTL safety net, seconds, so abandoned keys do not live forever. */
  retainSeconds: number;
}

export const defaultPolicy: CachePolicy = {
  strategy: "plain",
  version: 1,
  l2TtlSeconds: 30 * 60,
  jitter: 0.1,
  l1TtlMs: 2_000,
  l1Max: 10_000,
  nullTtlSeconds: 120,
  lockTtlMs: 5_000,
  waitMs: 500,
  retainSeconds: 7 * 24 * 3600,
};

export interface CacheModuleDef<K extends string | number, V, P = never> {
  /** Module name; L2 keys are `cache:{name}:{key}` (the classic `cache:shop:{id}`). */
  name: string;
  policy: Partial<CachePolicy>;
  /** Origin read. `null` = the key does not exist (cached as null). Throws on origin failure. */
  load(deps: Deps, key: K): Promise<V | null>;
  /**
   * What a GET serves for a value (`null` included), built once when the value enters L1 — so
   * every L1 hit of `serve` returns the same prepared response (body bytes + ETag, prepared.ts),
   * and a write (`set`) replaces it together with the value. Modules without it have no `serve`.
   */
  prepare?(value: V | null): P;
  /**
   * Numeric keys handed out in ascending order (auto-increment ids): the largest key the origin
   * holds now. With it, a key above the last ceiling read is absent without an origin query, so a
   * client probing random ids costs one Redis command per miss (lua/cache-probe.lua). `set` of a
   * value drops the ceiling (a new id may lie above it); it is read again on the next miss.
   */
  ceiling?(deps: Deps): Promise<number>;
}

export interface CacheCounters {
  l1Hits: number;
  l2Hits: number;
  staleServes: number;
  originLoads: number;
  nullHits: number;
  errors: number;
}

export const emptyCounters = (): CacheCounters => ({ l1Hits: 0, l2Hits: 0, staleServes: 0, originLoads: 0, nullHits: 0, errors: 0 });

interface L1Entry<V, P> {
  value: V | null;
  /** Until when this isolate may serve it without asking L2, epoch ms (L1 clock). */
  freshUntil: number;
  /** def.prepare(value), computed when the entry was stored. */
  prepared: P | undefined;
  /** When the value was stored (read from L2/origin or written), epoch ms: TTLs count from here. */
  storedAt: number;
  /** Fresh L1 hits in the current hot-key window (carried over when the value is replaced). */
  reads: number;
  /** End of the current hot-key window, epoch ms (Infinity: hot keys off). */
  windowEnd: number;
  /** Promoted: served with the hot rule's L1 TTL (listed in `promoted`). */
  promoted: boolean;
  /**
   * The module's write generation when the read that produced this value began: an entry whose
   * read began before a write of its key was seen in the write log may hold the old value and is
   * never promoted (CacheModule.readAfterWrites).
   */
  gen: number;
}

interface L2Entry<V> {
  v: number;
  d: V | null;
  x?: number;
}

/** Returned by `get`: `null` = known missing. */
export type CacheResult<V> = V | null;

export class CacheUnavailableError extends Error {
  constructor(name: string, cause: unknown) {
    super(`${name}: origin and cache both unavailable`, { cause });
    this.name = "CacheUnavailableError";
  }
}

/** One module's runtime in one isolate. Build with `createCacheModule` once per isolate. */
export class CacheModule<K extends string | number, V, P = never> {
  readonly name: string;
  readonly policy: CachePolicy;
  /** Counters since this isolate started (metrics.ts flushes deltas to Redis). */
  readonly counters: CacheCounters = emptyCounters();
  private readonly l1: SplitL1<L1Entry<V, P>>;
  private readonly inflight = new Map<string, Promise<V | null>>();
  /** logical: keys whose background rebuild this isolate already started. */
  private readonly rebuilding = new Set<string>();
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
  private readonly hotReads: number;
  private readonly hotWindowMs: number;

  constructor(
    private readonly def: CacheModuleDef<K, V, P>,
    private readonly now: () => number,
    private readonly hot?: HotKeys,
  ) {
    this.name = def.name;
    this.policy = { ...defaultPolicy, ...def.policy };
    this.hotReads = hot ? hot.rule.reads : Number.POSITIVE_INFINITY;
    this.hotWindowMs = hot ? hot.rule.windowMs : Number.POSITIVE_INFINITY;
    // L1 keeps entries past their freshness (ttl = 10× plus a floor) so a MySQL outage can still
    // be answered with the last value this isolate saw; `freshUntil` decides what is fresh.
    this.l1 = new SplitL1<L1Entry<V, P>>(
      new LRUCache<string, L1Entry<V, P>>({ max: this.policy.l1Max, ttl: Math.max(this.policy.l1TtlMs * 10, 60_000), ttlAutopurge: false }),
      new LRUCache<string, L1Entry<V, P>>({ max: NULL_L1_MAX, ttl: Math.max(this.policy.l1TtlMs * 10, 60_000), ttlAutopurge: false }),
    );
  }

  l2Key(key: K): string {
    return keys.cache(this.name, key);
  }

  /** Reads through L1 → L2 → origin according to the module's strategy. */
  async get(deps: Deps, key: K): Promise<CacheResult<V>> {
    const id = String(key);
    const cached = this.l1.get(id);
    if (cached && this.isFreshHit(id, cached)) {
      this.counters.l1Hits++;
      if (cached.value === null) this.counters.nullHits++;
      return cached.value;
    }
    // Concurrent misses of one key share one load where requests may share in-flight I/O; on
    // workerd each request loads for itself (src/runtime.ts) — a `mutex` module still collapses
    // the origin loads across requests through its Redis lock, and what a load brings back lands
    // in L1 for every later request.
    const shared = deps.runtime.sharesIo;
    const running = shared ? this.inflight.get(id) : undefined;
    if (running) return await running;
    if (cached && deps.isolate.resilience.redis.degraded) return this.serveStaleWhileRedisDown(deps, key, cached);
    if (!shared) return await this.fetchL2(deps, key, cached);
    const p = this.fetchL2(deps, key, cached).finally(() => this.inflight.delete(id));
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
    const id = String(key);
    const cached = this.l1.get(id);
    if (cached && cached.prepared !== undefined && this.isFreshHit(id, cached)) {
      this.counters.l1Hits++;
      if (cached.value === null) this.counters.nullHits++;
      return cached.prepared;
    }
    return this.serveSlow(deps, key, onSlowValue);
  }

  /** Would a read of `key` be answered from L1 right now? No counter, no recency, no hot-key tick. */
  inMemory(key: K): boolean {
    const e = this.l1.peek(String(key));
    return e !== undefined && e.freshUntil > this.now();
  }

  /** A fresh L1 hit's prepared response (counted as a hit), or undefined: no load is started. */
  peekFresh(key: K): P | undefined {
    const id = String(key);
    const cached = this.l1.get(id);
    if (!cached || cached.prepared === undefined || !this.isFreshHit(id, cached)) return undefined;
    this.counters.l1Hits++;
    if (cached.value === null) this.counters.nullHits++;
    return cached.prepared;
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

  /**
   * Redis's breaker is open or probing (src/resilience.ts): the read serves what this isolate has
   * at once instead of queueing behind Redis (single-flight would otherwise park every reader of
   * the key behind one call that may take a whole REDIS_TIMEOUT_MS, e.g. the half-open probe), and
   * one background origin load per key refreshes L1 from MySQL — so the value is never staler than
   * a MySQL round trip plus its L1 freshness. A failed refresh leaves the stale value in place.
   */
  private serveStaleWhileRedisDown(deps: Deps, key: K, cached: L1Entry<V, P>): V | null {
    this.counters.staleServes++;
    this.inBackgroundOnce(deps, key, "cache origin refresh failed (Redis down, stale value kept)", async (id, gen) => {
      this.counters.originLoads++;
      this.remember(id, await this.def.load(deps, key), gen);
    });
    return cached.value;
  }

  /**
   * Runs `work` in the background (deps.waitUntil) unless this key already has background work in
   * flight in this isolate (`rebuilding`): at most one refresh per key at a time. `gen` is the write
   * generation taken before it starts, like every read path: a write seen meanwhile keeps what it
   * brings back from being promoted. A failure is counted and logged; the L1 keeps what it had.
   */
  private inBackgroundOnce(deps: Deps, key: K, failure: string, work: (id: string, gen: number) => Promise<void>): void {
    const id = String(key);
    if (this.rebuilding.has(id)) return;
    this.rebuilding.add(id);
    const gen = this.writeGen;
    const task = (async () => {
      try {
        await work(id, gen);
      } catch (err) {
        this.counters.errors++;
        deps.log.warn(failure, { module: this.name, key: id, err });
      } finally {
        this.rebuilding.delete(id);
      }
    })();
    deps.waitUntil(task);
  }

  /** Write path: the caller wrote MySQL first; this overwrites (not deletes) L2 and L1. */
  async set(deps: Deps, key: K, value: V | null): Promise<void> {
    // A value may be a new id above the module's ceiling: the ceiling goes (read again on a miss).
    const dropCeiling = value !== null && this.def.ceiling !== undefined;
    if (this.hot || dropCeiling) {
      // One request: the L2 write, then the write-log entry that makes other isolates drop their
      // (possibly promoted) copies. In this order, so an isolate that reacts to the log re-reads
      // the new value.
      const p = deps.redis.pipeline();
      const [k, json, opts] = this.l2Write(key, value);
      p.set(k, json, opts);
      if (dropCeiling) p.del(keys.cacheCeiling(this.name));
      this.hot?.logWrite(p, this.name, String(key));
      await p.exec();
    } else {
      await this.writeL2(deps.redis, key, value);
    }
    this.remember(String(key), value, this.writeGen);
  }

  /** Drops the entry everywhere this isolate can reach (other isolates' L1 ages out, or drop it on the write log). */
  async delete(deps: Deps, key: K): Promise<void> {
    this.l1.delete(String(key));
    this.promoted.delete(String(key));
    if (this.hot) {
      const p = deps.redis.pipeline();
      p.del(this.l2Key(key));
      this.hot.logWrite(p, this.name, String(key));
      await p.exec();
    } else {
      await deps.redis.del(this.l2Key(key));
    }
  }

  /**
   * Hot-key bookkeeping of a fresh L1 hit: counts it, and on the rule's read count or the first
   * hit after the window ended hands over to `tick` (rare: about once per window per key).
   * False when `tick` just demoted the entry past its freshness.
   */
  private isFreshHit(id: string, e: L1Entry<V, P>): boolean {
    const now = this.now();
    if (e.freshUntil <= now) return false;
    if (++e.reads === this.hotReads || now >= e.windowEnd) {
      this.tick(id, e, now);
      return e.freshUntil > now;
    }
    return true;
  }

  /** Rolls the entry's window (demoting a key that fell below the rule) and promotes a key that reached it. */
  private tick(id: string, e: L1Entry<V, P>, now: number): void {
    const hot = this.hot;
    if (!hot) return;
    if (now >= e.windowEnd) {
      // This hit is the first after the window: the window held reads − 1.
      const last = e.reads - 1;
      e.reads = 1;
      e.windowEnd = now + this.hotWindowMs;
      if (e.promoted) {
        if (last >= this.hotReads) this.promoted.set(id, (this.promoted.get(id) ?? 0) + last);
        else this.demote(id, e);
      }
    }
    if (!e.promoted && e.reads >= this.hotReads && hot.ready && this.readAfterWrites(id, e.gen) && this.promoted.size < hot.rule.maxPromoted) {
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

  /** Whether `key` is promoted in this isolate (tests, the operator view). */
  isPromoted(key: K): boolean {
    return this.l1.peek(String(key))?.promoted === true;
  }

  /** Forget this isolate's L1 (tests; a deploy-time cache flush). */
  clearL1(): void {
    this.l1.clear();
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

  /**
   * Stores a value in L1. The hot-key state of the entry it replaces carries over (a promoted key
   * stays promoted across its refreshes) unless a write was seen since the read began (`gen`).
   */
  private remember(id: string, value: V | null, gen: number): void {
    const now = this.now();
    const prev = this.l1.peek(id);
    const promoted = prev !== undefined && prev.promoted && this.readAfterWrites(id, gen);
    if (prev?.promoted && !promoted) this.promoted.delete(id);
    this.l1.set(id, {
      value,
      freshUntil: now + this.ttlOf(value, promoted),
      prepared: this.def.prepare?.(value),
      storedAt: now,
      reads: prev ? prev.reads : 0,
      windowEnd: prev ? prev.windowEnd : now + this.hotWindowMs,
      promoted,
      gen,
    });
  }

  private jittered(seconds: number): number {
    const j = this.policy.jitter;
    return Math.max(1, Math.round(seconds * (1 - j + Math.random() * 2 * j)));
  }

  private async readL2(redis: RedisPort, key: K): Promise<L2Entry<V> | undefined> {
    // The SDK JSON-parses stored JSON; a foreign or corrupt value counts as a miss.
    return this.entryOf(await redis.get<L2Entry<V> | string>(this.l2Key(key)));
  }

  /** A stored entry of this module's version (the SDK JSON-parses replies; a script's may still be text), else undefined. */
  private entryOf(raw: unknown): L2Entry<V> | undefined {
    let e = raw;
    if (typeof e === "string") {
      try {
        e = JSON.parse(e);
      } catch {
        return undefined;
      }
    }
    if (e === null || typeof e !== "object" || (e as L2Entry<V>).v !== this.policy.version || !("d" in e)) return undefined;
    return e as L2Entry<V>;
  }

  /** The SET of an L2 write: key, JSON, expiry. */
  private l2Write(key: K, value: V | null): [string, string, { ex: number }] {
    const p = this.policy;
    if (value === null) return [this.l2Key(key), JSON.stringify({ v: p.version, d: null }), { ex: p.nullTtlSeconds }];
    if (p.strategy === "logical") {
      const entry: L2Entry<V> = { v: p.version, d: value, x: this.now() + this.jittered(p.l2TtlSeconds) * 1000 };
      return [this.l2Key(key), JSON.stringify(entry), { ex: p.retainSeconds }];
    }
    return [this.l2Key(key), JSON.stringify({ v: p.version, d: value }), { ex: this.jittered(p.l2TtlSeconds) }];
  }

  private async writeL2(redis: RedisPort, key: K, value: V | null): Promise<void> {
    const [k, json, opts] = this.l2Write(key, value);
    await redis.set(k, json, opts);
  }

  /**
   * One command (lua/cache-probe.lua) where it saves some: the entry, or "absent above the
   * ceiling", or the rebuild lock taken in the same step. A plain module without a ceiling reads
   * with a GET. `lock`: taken (a handle), held elsewhere (null), not asked (undefined).
   */
  private async probeL2(redis: RedisPort, key: K): Promise<{ entry?: L2Entry<V>; above?: true; lock?: LockHandle | null; ceilingKnown: boolean }> {
    const locking = this.policy.strategy !== "plain";
    const bounded = this.def.ceiling !== undefined && typeof key === "number";
    if (!locking && !bounded) return { entry: await this.readL2(redis, key), ceilingKnown: false };
    const token = locking ? crypto.randomUUID() : "";
    const lockKey = keys.lock(`cache:${this.name}:${key}`);
    const [code, x] = await scriptsFor(redis).cacheProbe.exec([this.l2Key(key), lockKey, keys.cacheCeiling(this.name)], [bounded ? String(key) : "", token, String(this.policy.lockTtlMs)]);
    if (code === 1) return { entry: this.entryOf(x), ceilingKnown: false };
    if (code === 2) return { above: true, ceilingKnown: true };
    const ceilingKnown = Number(x) === 1;
    if (code === 3) return { lock: lockHandle(redis, lockKey, token), ceilingKnown };
    return { lock: code === 4 ? null : undefined, ceilingKnown };
  }

  private async fetchL2(deps: Deps, key: K, staleL1: L1Entry<V, P> | undefined): Promise<V | null> {
    const id = String(key);
    // Captured before the read: a write seen while it runs keeps what it brings back unpromotable.
    const gen = this.writeGen;
    let probe: Awaited<ReturnType<typeof this.probeL2>>;
    try {
      probe = await this.probeL2(deps.redis, key);
    } catch (err) {
      // Redis down: fall through to MySQL (each isolate still single-flights its own loads).
      this.counters.errors++;
      deps.log.warn("cache L2 read failed", { module: this.name, err });
      return await this.loadOrStale(deps, key, staleL1?.value, false, gen);
    }
    const { entry } = probe;
    if (probe.above) {
      // Above the ceiling: absent, answered by L2 without an origin query.
      this.counters.l2Hits++;
      this.counters.nullHits++;
      this.remember(id, null, gen);
      return null;
    }
    if (entry) {
      if (!this.expired(entry)) {
        this.counters.l2Hits++;
        if (entry.d === null) this.counters.nullHits++;
        this.remember(id, entry.d, gen);
        return entry.d;
      }
      // Logical expiry: serve the stale value now, refresh once in the background.
      this.counters.staleServes++;
      this.startBackgroundRebuild(deps, key);
      return entry.d;
    }
    const fill = { ceilingKnown: probe.ceilingKnown };
    if (this.policy.strategy === "plain") return await this.loadOrStale(deps, key, staleL1?.value, true, gen, fill);
    if (probe.lock) return await this.loadOrStale(deps, key, staleL1?.value, true, gen, { ...fill, lock: probe.lock });
    if (probe.lock === undefined) return await this.rebuildUnderLock(deps, key, staleL1?.value, gen); // a foreign entry: no lock was asked
    return await this.awaitRebuild(deps, key, staleL1?.value, gen);
  }

  /** logical: an entry past its own expiry (served stale while one rebuild runs). */
  private expired(entry: L2Entry<V>): boolean {
    return this.policy.strategy === "logical" && entry.d !== null && (entry.x ?? 0) <= this.now();
  }

  /** mutex (and a cold logical key) when the probe could not take the lock itself: take it, double-check, load. */
  private async rebuildUnderLock(deps: Deps, key: K, stale: V | null | undefined, gen: number): Promise<V | null> {
    let lock: Awaited<ReturnType<typeof tryLock>> = null;
    try {
      lock = await tryLock(deps.redis, `cache:${this.name}:${key}`, this.policy.lockTtlMs);
    } catch (err) {
      this.counters.errors++;
      deps.log.warn("cache lock failed", { module: this.name, err });
      return await this.loadOrStale(deps, key, stale, false, gen);
    }
    if (!lock) return await this.awaitRebuild(deps, key, stale, gen);
    try {
      // Double-check: the previous holder may have written L2 between our read and our lock.
      const again = await this.readL2(deps.redis, key);
      if (again && !this.expired(again)) {
        this.counters.l2Hits++;
        this.remember(String(key), again.d, gen);
        return again.d;
      }
      return await this.loadOrStale(deps, key, stale, true, gen);
    } finally {
      await lock.release().catch(() => {});
    }
  }

  /** Someone else rebuilds: poll L2 with short sleeps (10 → 80 ms), bounded by waitMs, then load ourselves. */
  private async awaitRebuild(deps: Deps, key: K, stale: V | null | undefined, gen: number): Promise<V | null> {
    const deadline = this.now() + this.policy.waitMs;
    let pause = 10;
    while (this.now() < deadline) {
      await new Promise((r) => setTimeout(r, pause));
      pause = Math.min(pause * 2, 80);
      const entry = await this.readL2(deps.redis, key).catch(() => undefined);
      if (entry) {
        this.counters.l2Hits++;
        this.remember(String(key), entry.d, gen);
        return entry.d;
      }
    }
    return await this.loadOrStale(deps, key, stale, true, gen);
  }

  private startBackgroundRebuild(deps: Deps, key: K): void {
    this.inBackgroundOnce(deps, key, "cache background rebuild failed", async (id, gen) => {
      const lock = await tryLock(deps.redis, `cache:${this.name}:${key}`, this.policy.lockTtlMs);
      if (!lock) return; // another isolate is rebuilding it
      try {
        const fresh = await this.readL2(deps.redis, key);
        if (fresh && fresh.d !== null && (fresh.x ?? 0) > this.now()) {
          this.remember(id, fresh.d, gen);
          return;
        }
        this.counters.originLoads++;
        const value = await this.def.load(deps, key);
        await this.writeL2(deps.redis, key, value);
        this.remember(id, value, gen);
      } finally {
        await lock.release().catch(() => {});
      }
    });
  }

  /**
   * Origin load; on success writes L2 (when `writeBack`) and L1. On origin failure serves the
   * stale value if any (counted as a stale serve), else throws CacheUnavailableError. `fill`: the
   * probe's findings — the write goes through lua/cache-fill.lua, which also releases `fill.lock`
   * and, for a key found absent with no ceiling known, writes the module's ceiling.
   */
  private async loadOrStale(deps: Deps, key: K, stale: V | null | undefined, writeBack: boolean, gen: number, fill?: { lock?: LockHandle; ceilingKnown: boolean }): Promise<V | null> {
    const id = String(key);
    let value: V | null;
    try {
      this.counters.originLoads++;
      value = await this.def.load(deps, key);
    } catch (err) {
      await fill?.lock?.release().catch(() => {});
      this.counters.errors++;
      deps.log.warn("cache origin load failed", { module: this.name, key: id, err });
      let fallback = stale;
      if (fallback === undefined) {
        // The L1 copy is gone; an L2 copy of any age (logical entries outlive expiry) will do.
        fallback = (await this.readL2(deps.redis, key).catch(() => undefined))?.d;
      }
      if (fallback !== undefined) {
        this.counters.staleServes++;
        return fallback;
      }
      throw new CacheUnavailableError(this.name, err);
    }
    if (writeBack) {
      try {
        if (fill) await this.fillL2(deps, key, value, fill);
        else await this.writeL2(deps.redis, key, value);
      } catch (err) {
        await fill?.lock?.release().catch(() => {});
        this.counters.errors++;
        deps.log.warn("cache L2 write failed", { module: this.name, err });
      }
    }
    this.remember(id, value, gen);
    return value;
  }

  /** The L2 write after a probe: entry, ceiling (see loadOrStale) and lock release in one command. */
  private async fillL2(deps: Deps, key: K, value: V | null, fill: { lock?: LockHandle; ceilingKnown: boolean }): Promise<void> {
    const [k, json, { ex }] = this.l2Write(key, value);
    let ceiling = "";
    if (value === null && !fill.ceilingKnown && this.def.ceiling && typeof key === "number") {
      // Read after the load found the key absent, so it is at least every id that existed then.
      ceiling = String(await this.def.ceiling(deps).catch(() => ""));
    }
    const lockKey = fill.lock?.key ?? keys.lock(`cache:${this.name}:${key}`);
    await scriptsFor(deps.redis).cacheFill.exec([k, lockKey, keys.cacheCeiling(this.name)], [json, String(ex), fill.lock?.token ?? "", ceiling, String(this.policy.nullTtlSeconds)]);
  }
}

export function createCacheModule<K extends string | number, V, P = never>(def: CacheModuleDef<K, V, P>, now: () => number = Date.now, hot?: HotKeys): CacheModule<K, V, P> {
  return new CacheModule(def, now, hot);
}

/** Known-missing keys one module's L1 remembers, apart from its values. */
export const NULL_L1_MAX = 1_000;

/**
 * A module's L1 in two LRUs: values, and known-missing keys (`value === null`). A caller probing
 * random ids (issue 16: unknown shop and voucher ids) fills only the second, so it can never evict
 * a live entry — a sale's config, a hot shop — from the first. The interface is the slice of
 * LRUCache the module uses; a key lives in at most one of the two.
 */
class SplitL1<E extends { value: unknown }> {
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

/**
 * What a cache module is made of: its policy, its declaration (loaders handed in by the
 * composition root, src/caches.ts), its counters and its one error. No domain here: the cache
 * is a mechanism, and every module is declared where the services are known.
 */
import type { Deps } from "../deps.ts";

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
  /**
   * L1 stale window, ms: how long past its L1 freshness a value (never a known-missing id) is
   * still answered from this isolate's memory while one background refresh per key runs (in the
   * `waitUntil` of the request that found it stale; other requests only read memory). A value so
   * served was read from L2 at most l1TtlMs + l1StaleMs ago; under steady traffic it is replaced
   * one refresh (one L2 round trip) after its freshness ends. A key the write log names loses this
   * window with its freshness. 0: off, a read past freshness waits for L2.
   */
  l1StaleMs: number;
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
  l1StaleMs: 0,
  l1Max: 10_000,
  nullTtlSeconds: 120,
  lockTtlMs: 5_000,
  waitMs: 500,
  retainSeconds: 7 * 24 * 3600,
};

export interface CacheModuleDef<K extends string | number, V, P = never> {
  /** Module name; L2 keys are `cache:{<name>:b<n>}:<key>` (keys.cache: the hash tag of the key's bucket). */
  name: string;
  /**
   * What an answer calls this data when neither origin nor cache can give it: the app's error
   * handler answers `503 "<subject> temporarily unavailable"` (default: the module name).
   */
  subject?: string;
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

export const emptyCounters = (): CacheCounters => ({
  l1Hits: 0,
  l2Hits: 0,
  staleServes: 0,
  originLoads: 0,
  nullHits: 0,
  errors: 0,
});

/** Returned by `get`: `null` = known missing. */
export type CacheResult<V> = V | null;

/** Origin failed and no copy of any age was at hand. The app's error handler (src/app.ts) answers it with a 503. */
export class CacheUnavailableError extends Error {
  constructor(
    readonly module: string,
    cause: unknown,
    /** CacheModuleDef.subject. */
    readonly subject: string = module,
  ) {
    super(`${module}: origin and cache both unavailable`, { cause });
    this.name = "CacheUnavailableError";
  }
}

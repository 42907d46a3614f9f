/**
 * What lies behind a module's L1: L2 = Redis, then origin (the module's loader, MySQL), by the
 * module's strategy.
 *
 * - `plain`   L2 entries carry a Redis TTL (jittered); a miss loads from origin.
 * - `mutex`   on an L2 miss one caller (across isolates) rebuilds under a Redis lock; the others
 *             wait briefly and re-read L2, then load themselves only if the wait ran out.
 * - `logical` L2 entries carry their own expiry and no (short) Redis TTL; an expired entry is
 *             served at once ("stale") while exactly one background rebuild, under the lock,
 *             refreshes it. Hot keys therefore never stampede MySQL and never block on it.
 * A read that loads from origin answers with the value as soon as it has it: the L2 write after the
 * load (the fill, which also releases the rebuild lock) is sent at once but runs in the request's
 * `waitUntil`, so a cold read costs the probe and the load, not a third trip. The lock is held
 * until the fill lands (other readers keep waiting for the entry, no herd) or its TTL ends.
 * Everywhere: known-missing ids are cached as null for `nullTtlSeconds`; a Redis failure falls
 * through to MySQL; a MySQL failure serves the stale L1/L2 value if there is one. One command
 * where it saves some (lua/cache-probe.lua: entry, ceiling and lock in one step; lua/cache-fill.lua:
 * the write after a load, with the ceiling and the lock release). The three keys share the hash tag
 * of the entry's bucket (src/redis/keys.ts), so each script stays in one slot of a clustered Redis.
 *
 * L2 value format (JSON): `{"v": version, "d": data | null, "x"?: logicalExpiryEpochMs}`. Entries of
 * another version are misses, so bumping `version` retires every entry without a scan.
 */
import type { Deps, RedisPort } from "../deps.ts";
import { keys } from "../redis/keys.ts";
import { type LockHandle, lockHandle, tryLockKey } from "../redis/lock.ts";
import { scriptsFor } from "../redis/scripts.ts";
import { type CacheCounters, type CacheModuleDef, type CachePolicy, CacheUnavailableError } from "./policy.ts";

interface L2Entry<V> {
  v: number;
  d: V | null;
  x?: number;
}

/** What the probe found: the entry, or "absent above the ceiling", or the rebuild lock (taken: a handle; held elsewhere: null; not asked: undefined). */
interface Probe<V> {
  entry?: L2Entry<V>;
  above?: true;
  lock?: LockHandle | null;
  ceilingKnown: boolean;
}

/** The probe's findings a load's L2 write completes (see `fill`). */
interface Fill {
  lock?: LockHandle;
  ceilingKnown: boolean;
}

/** Where the tiers put what they read: the module's L1 (with its hot-key state). */
export interface L1Sink<V> {
  /** The write generation now: a read captures it before it starts (HotPromotion.gen). */
  gen(): number;
  /** Stores a value whose read began at generation `gen`. */
  remember(id: string, value: V | null, gen: number): void;
}

/** One module's L2 and origin tiers in one isolate (built by CacheModule). */
export class Tiers<K extends string | number, V, P> {
  /** logical (and Redis-down refreshes): keys whose background work this isolate already started. */
  private readonly rebuilding = new Set<string>();

  constructor(
    private readonly def: CacheModuleDef<K, V, P>,
    private readonly policy: CachePolicy,
    private readonly counters: CacheCounters,
    private readonly now: () => number,
    private readonly l1: L1Sink<V>,
  ) {}

  l2Key(key: K): string {
    return keys.cache(this.def.name, key);
  }

  /**
   * The read after an L1 miss: L2 (one probe), then origin by the strategy. `stale`: the L1 value
   * past its freshness, if any (served when origin fails). `bg`: this read is itself background
   * work (refreshStale), so it does its writes and rebuilds inline instead of deferring them.
   */
  async read(deps: Deps, key: K, stale: V | null | undefined, bg = false): Promise<V | null> {
    const id = String(key);
    // Captured before the read: a write seen while it runs keeps what it brings back unpromotable.
    const gen = this.l1.gen();
    let probe: Probe<V>;
    try {
      probe = await this.probeNearest(deps, key);
    } catch (err) {
      // Redis down: fall through to MySQL (each isolate still single-flights its own loads).
      this.counters.errors++;
      deps.log.warn("cache L2 read failed", { module: this.def.name, err });
      return await this.loadOrStale(deps, key, stale, false, gen, bg);
    }
    const { entry } = probe;
    if (probe.above) {
      // Above the ceiling: absent, answered by L2 without an origin query.
      this.counters.l2Hits++;
      this.counters.nullHits++;
      this.l1.remember(id, null, gen);
      return null;
    }
    if (entry) {
      if (!this.expired(entry)) {
        this.counters.l2Hits++;
        if (entry.d === null) this.counters.nullHits++;
        this.l1.remember(id, entry.d, gen);
        return entry.d;
      }
      // Logical expiry: serve the stale value now, refresh once in the background (already there: inline).
      this.counters.staleServes++;
      if (bg) await this.rebuild(deps, key, id, gen);
      else this.startBackgroundRebuild(deps, key);
      return entry.d;
    }
    const fill = { ceilingKnown: probe.ceilingKnown };
    if (this.policy.strategy === "plain") return await this.loadOrStale(deps, key, stale, true, gen, bg, fill);
    if (probe.lock) return await this.loadOrStale(deps, key, stale, true, gen, bg, { ...fill, lock: probe.lock });
    if (probe.lock === undefined) return await this.rebuildUnderLock(deps, key, stale, gen, bg); // a foreign entry: no lock was asked
    return await this.awaitRebuild(deps, key, stale, gen, bg);
  }

  /**
   * An L1 value past its freshness but inside its stale window (CachePolicy.l1StaleMs) is being
   * served from memory: one refresh per key per isolate (`rebuilding`) reads it again through L2
   * (and origin, by the strategy) in the `waitUntil` of the request that found it stale. Nobody
   * awaits it; what it brings back lands in L1 for later requests. A failure keeps the old value.
   */
  refreshStale(deps: Deps, key: K, stale: V | null): void {
    this.counters.staleServes++;
    this.inBackgroundOnce(deps, key, "cache refresh failed (stale value kept)", async () => {
      await this.read(deps, key, stale, true);
    });
  }

  /**
   * Redis's breaker is open or probing (src/resilience.ts): the read serves what this isolate has
   * at once instead of queueing behind Redis (single-flight would otherwise park every reader of
   * the key behind one call that may take a whole REDIS_TIMEOUT_MS, e.g. the half-open probe), and
   * one background origin load per key refreshes L1 from MySQL — so the value is never staler than
   * a MySQL round trip plus its L1 freshness. A failed refresh leaves the stale value in place.
   */
  staleWhileRedisDown(deps: Deps, key: K, stale: V | null): V | null {
    this.counters.staleServes++;
    this.inBackgroundOnce(deps, key, "cache origin refresh failed (Redis down, stale value kept)", async (id, gen) => {
      this.counters.originLoads++;
      this.l1.remember(id, await this.def.load(deps, key), gen);
    });
    return stale;
  }

  /** The SET of an L2 write: key, JSON, expiry. */
  l2Write(key: K, value: V | null): [string, string, { ex: number }] {
    const p = this.policy;
    if (value === null) return [this.l2Key(key), JSON.stringify({ v: p.version, d: null }), { ex: p.nullTtlSeconds }];
    if (p.strategy === "logical") {
      const entry: L2Entry<V> = { v: p.version, d: value, x: this.now() + this.jittered(p.l2TtlSeconds) * 1000 };
      return [this.l2Key(key), JSON.stringify(entry), { ex: p.retainSeconds }];
    }
    return [this.l2Key(key), JSON.stringify({ v: p.version, d: value }), { ex: this.jittered(p.l2TtlSeconds) }];
  }

  async writeL2(redis: RedisPort, key: K, value: V | null): Promise<void> {
    const [k, json, opts] = this.l2Write(key, value);
    await redis.set(k, json, opts);
  }

  /** The one expiry predicate: a `logical` entry past its own expiry (served stale while one rebuild runs). */
  private expired(entry: L2Entry<V>): boolean {
    return this.policy.strategy === "logical" && entry.d !== null && (entry.x ?? 0) <= this.now();
  }

  /** Whether the module keeps a ceiling for this key (numeric keys of a module with `ceiling`). */
  private bounded(key: K): boolean {
    return this.def.ceiling !== undefined && typeof key === "number";
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
    if (e === null || typeof e !== "object" || (e as L2Entry<V>).v !== this.policy.version || !("d" in e))
      return undefined;
    return e as L2Entry<V>;
  }

  /**
   * With a read region (deps.redisRead): a GET there first, and an entry found is the answer (the
   * region holds this isolate's own writes, src/deps.ts); a miss, or a failing region, probes the
   * primary, since the probe may take the rebuild lock (a write). Without one: the probe alone.
   */
  private async probeNearest(deps: Deps, key: K): Promise<Probe<V>> {
    if (deps.redisRead !== null) {
      const entry = await this.readL2(deps.redisRead, key).catch((err: unknown) => {
        deps.log.warn("cache L2 read from the read region failed; probing the primary", { module: this.def.name, err });
        return undefined;
      });
      if (entry) return { entry, ceilingKnown: false };
    }
    return await this.probe(deps.redis, key);
  }

  /**
   * One command (lua/cache-probe.lua) where it saves some: the entry, or "absent above the
   * ceiling", or the rebuild lock taken in the same step. A plain module without a ceiling reads
   * with a GET.
   */
  private async probe(redis: RedisPort, key: K): Promise<Probe<V>> {
    const locking = this.policy.strategy !== "plain";
    const bounded = this.bounded(key);
    if (!locking && !bounded) return { entry: await this.readL2(redis, key), ceilingKnown: false };
    const token = locking ? crypto.randomUUID() : "";
    const lockKey = keys.cacheLock(this.def.name, key);
    const [code, x] = await scriptsFor(redis).cacheProbe.exec(
      [this.l2Key(key), lockKey, keys.cacheCeiling(this.def.name, key)],
      [bounded ? String(key) : "", token, String(this.policy.lockTtlMs)],
    );
    if (code === 1) return { entry: this.entryOf(x), ceilingKnown: false };
    if (code === 2) return { above: true, ceilingKnown: true };
    const ceilingKnown = Number(x) === 1;
    if (code === 3) return { lock: lockHandle(redis, lockKey, token), ceilingKnown };
    return { lock: code === 4 ? null : undefined, ceilingKnown };
  }

  /** mutex (and a cold logical key) when the probe could not take the lock itself: take it, double-check, load. */
  private async rebuildUnderLock(
    deps: Deps,
    key: K,
    stale: V | null | undefined,
    gen: number,
    bg: boolean,
  ): Promise<V | null> {
    let lock: LockHandle | null = null;
    try {
      lock = await tryLockKey(deps.redis, keys.cacheLock(this.def.name, key), this.policy.lockTtlMs);
    } catch (err) {
      this.counters.errors++;
      deps.log.warn("cache lock failed", { module: this.def.name, err });
      return await this.loadOrStale(deps, key, stale, false, gen, bg);
    }
    if (!lock) return await this.awaitRebuild(deps, key, stale, gen, bg);
    let handedOver = false;
    try {
      // Double-check: the previous holder may have written L2 between our read and our lock.
      const again = await this.readL2(deps.redis, key);
      if (again && !this.expired(again)) {
        this.counters.l2Hits++;
        this.l1.remember(String(key), again.d, gen);
        return again.d;
      }
      // From here the load owns the lock: its fill releases it with the write (or it is released on
      // failure). No ceiling write on this path (`ceilingKnown`): it never had the probe's finding.
      handedOver = true;
      return await this.loadOrStale(deps, key, stale, true, gen, bg, { lock, ceilingKnown: true });
    } finally {
      if (!handedOver) await lock.release().catch(() => {});
    }
  }

  /** Someone else rebuilds: poll L2 with short sleeps (10 → 80 ms), bounded by waitMs, then load ourselves. */
  private async awaitRebuild(
    deps: Deps,
    key: K,
    stale: V | null | undefined,
    gen: number,
    bg: boolean,
  ): Promise<V | null> {
    const deadline = this.now() + this.policy.waitMs;
    let pause = 10;
    while (this.now() < deadline) {
      await new Promise((r) => setTimeout(r, pause));
      pause = Math.min(pause * 2, 80);
      const entry = await this.readL2(deps.redis, key).catch(() => undefined);
      if (entry) {
        this.counters.l2Hits++;
        this.l1.remember(String(key), entry.d, gen);
        return entry.d;
      }
    }
    return await this.loadOrStale(deps, key, stale, true, gen, bg);
  }

  private startBackgroundRebuild(deps: Deps, key: K): void {
    this.inBackgroundOnce(deps, key, "cache background rebuild failed", (id, gen) => this.rebuild(deps, key, id, gen));
  }

  /** A logical entry's rebuild (background work): under the lock, double-check L2, load, write L2 and L1. */
  private async rebuild(deps: Deps, key: K, id: string, gen: number): Promise<void> {
    const lock = await tryLockKey(deps.redis, keys.cacheLock(this.def.name, key), this.policy.lockTtlMs);
    if (!lock) return; // another isolate is rebuilding it
    try {
      const fresh = await this.readL2(deps.redis, key);
      if (fresh && !this.expired(fresh)) {
        this.l1.remember(id, fresh.d, gen);
        return;
      }
      this.counters.originLoads++;
      const value = await this.def.load(deps, key);
      await this.writeL2(deps.redis, key, value);
      this.l1.remember(id, value, gen);
    } finally {
      await lock.release().catch(() => {});
    }
  }

  /**
   * Runs `work` in the background (deps.waitUntil) unless this key already has background work in
   * flight in this isolate (`rebuilding`): at most one refresh per key at a time. `gen` is the write
   * generation taken before it starts, like every read path: a write seen meanwhile keeps what it
   * brings back from being promoted. A failure is counted and logged; the L1 keeps what it had.
   */
  private inBackgroundOnce(
    deps: Deps,
    key: K,
    failure: string,
    work: (id: string, gen: number) => Promise<void>,
  ): void {
    const id = String(key);
    if (this.rebuilding.has(id)) return;
    this.rebuilding.add(id);
    const gen = this.l1.gen();
    const task = (async () => {
      try {
        await work(id, gen);
      } catch (err) {
        this.counters.errors++;
        deps.log.warn(failure, { module: this.def.name, key: id, err });
      } finally {
        this.rebuilding.delete(id);
      }
    })();
    deps.waitUntil(task);
  }

  /**
   * Origin load; on success writes L1 and answers, and writes L2 (when `writeBack`) in the
   * request's `waitUntil` (inline when `bg`: already background work). On origin failure serves
   * the stale value if any (counted as a stale serve), else throws CacheUnavailableError. `fill`:
   * the probe's findings — the write goes through lua/cache-fill.lua, which also releases
   * `fill.lock` and, for a key found absent with no ceiling known, writes the module's ceiling.
   */
  private async loadOrStale(
    deps: Deps,
    key: K,
    stale: V | null | undefined,
    writeBack: boolean,
    gen: number,
    bg: boolean,
    fill?: Fill,
  ): Promise<V | null> {
    const id = String(key);
    let value: V | null;
    try {
      this.counters.originLoads++;
      value = await this.def.load(deps, key);
    } catch (err) {
      await fill?.lock?.release().catch(() => {});
      this.counters.errors++;
      deps.log.warn("cache origin load failed", { module: this.def.name, key: id, err });
      let fallback = stale;
      if (fallback === undefined) {
        // The L1 copy is gone; an L2 copy of any age (logical entries outlive expiry) will do.
        fallback = (await this.readL2(deps.redis, key).catch(() => undefined))?.d;
      }
      if (fallback !== undefined) {
        this.counters.staleServes++;
        return fallback;
      }
      throw new CacheUnavailableError(this.def.name, err, this.def.subject);
    }
    this.l1.remember(id, value, gen);
    if (writeBack) {
      // Sent now either way (the same moment as an awaited write): only the wait leaves the answer's path.
      const write = (async () => {
        try {
          if (fill) await this.fill(deps, key, value, fill);
          else await this.writeL2(deps.redis, key, value);
        } catch (err) {
          await fill?.lock?.release().catch(() => {});
          this.counters.errors++;
          deps.log.warn("cache L2 write failed", { module: this.def.name, err });
        }
      })();
      // Awaited when already in the background, and when it establishes the module's ceiling (a key
      // found absent, none known): the reads of unknown ids right behind it must find the ceiling, or
      // each would query MySQL — a cost paid once per null TTL, not per read.
      if (bg || (value === null && fill && !fill.ceilingKnown && this.bounded(key))) await write;
      else deps.waitUntil(write);
    }
    return value;
  }

  /** The L2 write after a probe: entry, ceiling (see loadOrStale) and lock release in one command. */
  private async fill(deps: Deps, key: K, value: V | null, fill: Fill): Promise<void> {
    const [k, json, { ex }] = this.l2Write(key, value);
    let ceiling = "";
    if (value === null && !fill.ceilingKnown && this.def.ceiling && this.bounded(key)) {
      // Read after the load found the key absent, so it is at least every id that existed then.
      ceiling = String(await this.def.ceiling(deps).catch(() => ""));
    }
    const lockKey = fill.lock?.key ?? keys.cacheLock(this.def.name, key);
    const own = keys.cacheCeiling(this.def.name, key);
    const ttl = String(this.policy.nullTtlSeconds);
    await scriptsFor(deps.redis).cacheFill.exec(
      [k, lockKey, own],
      [json, String(ex), fill.lock?.token ?? "", ceiling, ttl],
    );
    if (ceiling === "") return;
    // The other buckets' copies (each in its own slot, so not in the script): one request, once per
    // ceiling read, so the next miss of any bucket finds a ceiling without its own MAX(id) query.
    const p = deps.redis.pipeline();
    for (const other of keys.cacheCeilings(this.def.name))
      if (other !== own) p.set(other, ceiling, { nx: true, ex: this.policy.nullTtlSeconds });
    await p.exec();
  }
}

/**
 * Cache counters across isolates. Each isolate counts locally (no Redis call per hit) and, at most
 * every `flushEveryMs`, adds its deltas to one Redis hash per module in the background; the admin
 * view sums what all isolates reported.
 */
import type { Deps } from "../deps.ts";
import { keys } from "../redis/keys.ts";
import type { HotKeys } from "./hot.ts";
import type { CacheModule } from "./module.ts";
import { type CacheCounters, emptyCounters } from "./policy.ts";

const FIELDS = Object.keys(emptyCounters()) as (keyof CacheCounters)[];

export class CacheMetrics {
  private readonly flushed = new Map<string, CacheCounters>();
  private lastFlush = 0;
  private flushing: Promise<void> | undefined;
  /** Hot keys (cache/hot.ts) ride on this flush: the write-log read and the report, same pipeline. */
  hot: HotKeys | undefined;

  constructor(
    private readonly modules: readonly CacheModule<string | number, unknown>[],
    private readonly flushEveryMs = 5_000,
    readonly isolateId: string = crypto.randomUUID(),
  ) {}

  /** Called per request; schedules a background flush when one is due. */
  maybeFlush(deps: Deps): void {
    const now = Date.now();
    if (this.flushing || now - this.lastFlush < this.flushEveryMs) return;
    this.lastFlush = now;
    deps.waitUntil(this.flush(deps));
  }

  /**
   * Adds the counts since the last flush to Redis. Waits for a running flush, then flushes again —
   * where requests may share in-flight I/O. On workerd a running flush belongs to another request
   * (its waitUntil): this call returns at once and a report reads what that isolate sent up to its
   * last finished flush (≤ one flush period old for this isolate's own counts).
   */
  async flush(deps: Deps): Promise<void> {
    if (this.flushing && !deps.runtime.sharesIo) return;
    while (this.flushing) await this.flushing;
    this.flushing = (async () => {
      try {
        await this.flushOnce(deps);
      } catch (err) {
        // A write-log read may have been lost: hot keys go back to their modules' TTLs.
        this.hot?.failed(this.modules);
        throw err;
      }
    })().finally(() => {
      this.flushing = undefined;
    });
    return await this.flushing;
  }

  private async flushOnce(deps: Deps): Promise<void> {
    const deltas: [string, keyof CacheCounters, number][] = [];
    const snapshot = new Map<string, CacheCounters>();
    for (const m of this.modules) {
      const prev = this.flushed.get(m.name) ?? emptyCounters();
      const cur = { ...m.counters };
      snapshot.set(m.name, cur);
      for (const f of FIELDS) {
        const delta = cur[f] - prev[f];
        if (delta !== 0) deltas.push([m.name, f, delta]);
      }
    }
    // Hot keys ride along only when the caches were read (a key can only become hot then) or
    // something is promoted; an idle isolate still sends nothing (hot.ts `idle`).
    const hotNeeded = this.hot !== undefined && (deltas.length > 0 || this.modules.some((m) => m.promoted.size > 0));
    if (this.hot && !hotNeeded) this.hot.idle();
    if (deltas.length === 0 && !hotNeeded) return;
    const p = deps.redis.pipeline();
    // First in the pipeline, so its replies start at index 0.
    const hot = hotNeeded ? this.hot?.addToFlush(p, this.modules) : undefined;
    for (const [name, f, delta] of deltas) p.hincrby(keys.cacheStats(name), f, delta);
    p.hset(keys.cacheIsolates(), { [this.isolateId]: Date.now() });
    const replies = (await p.exec()) as unknown[];
    hot?.apply(replies);
    for (const [k, v] of snapshot) this.flushed.set(k, v);
  }

  /**
   * GET /admin/cache/hot: the hottest keys across isolates (after flushing this isolate), or null
   * when hot keys are off. `flushed`: the caller has just flushed (the console's ops page calls it
   * right after `report`), so the report costs its one pipeline and no second flush.
   */
  async hotReport(deps: Deps, opts: { flushed?: boolean } = {}): Promise<import("./hot.ts").HotReport | null> {
    if (!this.hot) return null;
    if (!opts.flushed) await this.flush(deps);
    return await this.hot.report(deps, this.modules);
  }

  /** Totals per module across isolates (after flushing this isolate), plus this isolate's own. */
  async report(deps: Deps): Promise<{
    modules: Record<string, CacheCounters & { hitRatio: number }>;
    isolates: number;
    thisIsolate: Record<string, CacheCounters>;
  }> {
    await this.flush(deps);
    const p = deps.redis.pipeline();
    for (const m of this.modules) p.hgetall(keys.cacheStats(m.name));
    p.hlen(keys.cacheIsolates());
    const res = (await p.exec()) as unknown[];
    const modules: Record<string, CacheCounters & { hitRatio: number }> = {};
    this.modules.forEach((m, i) => {
      const raw = (res[i] ?? {}) as Record<string, number | string> | null;
      const c = emptyCounters();
      for (const f of FIELDS) c[f] = Number(raw?.[f] ?? 0);
      const served = c.l1Hits + c.l2Hits + c.staleServes + c.originLoads;
      modules[m.name] = {
        ...c,
        hitRatio: served === 0 ? 0 : Math.round(((c.l1Hits + c.l2Hits + c.staleServes) / served) * 10_000) / 10_000,
      };
    });
    const thisIsolate: Record<string, CacheCounters> = {};
    for (const m of this.modules) thisIsolate[m.name] = { ...m.counters };
    return { modules, isolates: Number(res[this.modules.length] ?? 0), thisIsolate };
  }
}

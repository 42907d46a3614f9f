/**
 * Hot keys: found per isolate, promoted in its L1, reported across isolates.
 *
 * Finding: each L1 entry counts its own fresh hits per window (cache/hot-promotion.ts `isFreshHit`), so
 * the count costs no map lookup and no memory beyond the L1 itself (bounded by each module's
 * `l1Max`). A key with ≥ `reads` hits in one window of `windowMs` is promoted: it stays fresh in
 * L1 for `l1TtlMs` (counted from when its value was read) instead of the module's TTL, so it
 * costs one Redis read per isolate per `l1TtlMs` instead of per module TTL. A window below the
 * rule demotes it at the first hit after that window.
 *
 * Writes still win: `set`/`delete` append "module:key" to one Redis stream (`cache:writes`, capped
 * at WRITE_LOG_MAX entries); every isolate reads the entries after its cursor in its cache
 * metrics flush (cache/metrics.ts, ≤ one pipeline per flush period, no per-request Redis) and
 * drops the L1 freshness of the keys named there. So a write reaches a promoted copy elsewhere
 * within one flush period (+ one round trip), and this isolate's own writes at once. Until the
 * isolate has a cursor (its first flush) and after a failed flush, nothing is promoted.
 *
 * Reporting: in the same pipeline each isolate adds the reads of its promoted keys (top
 * `reportTop`) to a per-minute ZSET (`cache:hot:{minute}`, and per isolate
 * `cache:hot:{minute}:by`), which expire after REPORT_KEEP_SECONDS. GET /admin/cache/hot merges
 * the current and previous minute.
 *
 * Hand-written (no library does this over lru-cache + a REST Redis): a few counters and one
 * stream read in an existing flush.
 */
import type { Deps } from "../deps.ts";
import type { Config } from "../env.ts";
import { keys } from "../redis/keys.ts";
import type { CacheModule } from "./module.ts";

export interface HotKeyRule {
  /** Fresh L1 hits within one window that promote a key. */
  reads: number;
  /** Window length, ms. */
  windowMs: number;
  /** L1 freshness of a promoted key, ms (never below the module's own). */
  l1TtlMs: number;
  /** Promoted keys per module at most. */
  maxPromoted: number;
  /** Promoted keys an isolate reports per flush at most (hottest first). */
  reportTop: number;
}

/** The rule from config; undefined when HOT_KEY_READS is 0 (off). */
export function hotKeyRuleOf(
  config: Pick<
    Config,
    "HOT_KEY_READS" | "HOT_KEY_WINDOW_MS" | "HOT_KEY_L1_TTL_MS" | "HOT_KEY_MAX" | "HOT_KEY_REPORT_TOP"
  >,
): HotKeyRule | undefined {
  if (config.HOT_KEY_READS === 0) return undefined;
  return {
    reads: config.HOT_KEY_READS,
    windowMs: config.HOT_KEY_WINDOW_MS,
    l1TtlMs: config.HOT_KEY_L1_TTL_MS,
    maxPromoted: config.HOT_KEY_MAX,
    reportTop: config.HOT_KEY_REPORT_TOP,
  };
}

/** Write-log entries kept in Redis (approximate trim). An isolate further behind loses nothing: see `apply`. */
const WRITE_LOG_MAX = 10_000;
/** Entries read per flush; a full batch demotes everything (it may hide more). */
const WRITE_LOG_BATCH = 500;
/** Per-minute report keys live this long, seconds. */
const REPORT_KEEP_SECONDS = 600;

type Pipeline = ReturnType<Deps["redis"]["pipeline"]>;
type Modules = readonly CacheModule<string | number, unknown>[];

export interface HotReport {
  rule: HotKeyRule;
  /** The minutes merged (epoch minutes). */
  minutes: number[];
  /** Across isolates, hottest first: reads reported in those minutes, and by how many isolates. */
  top: { module: string; key: string; reads: number; isolates: number }[];
  /** Keys promoted in the isolate that answered. */
  promotedHere: { module: string; key: string }[];
}

/** Whether stream id `a` ("ms-seq") comes after `b`. */
function streamIdAfter(a: string, b: string): boolean {
  const [am = 0, as = 0] = a.split("-").map(Number);
  const [bm = 0, bs = 0] = b.split("-").map(Number);
  return am > bm || (am === bm && as > bs);
}

/** One isolate's hot-key state shared by its cache modules (built once per isolate with the caches). */
export class HotKeys {
  /** True once the write log's cursor is known and the last read of it succeeded: only then may a key be promoted. */
  ready = false;
  /** The last write-log entry id this isolate applied (undefined: not yet anchored). */
  private cursor: string | undefined;
  /** A flush skipped the log since it was last read (see `idle`). */
  private skipped = false;

  constructor(
    readonly rule: HotKeyRule,
    readonly isolateId: string,
    private readonly now: () => number,
  ) {}

  /** Appends a write of `module:id` to the log (in the writer's pipeline, after its L2 write). */
  logWrite(p: Pipeline, module: string, id: string): void {
    p.xadd(
      keys.cacheWrites(),
      "*",
      { k: `${module}:${id}` },
      { trim: { type: "MAXLEN", threshold: WRITE_LOG_MAX, comparison: "~" } },
    );
  }

  /**
   * Adds this flush's commands to `p` (first in the pipeline): the write-log read, then the
   * report. Returns how many replies they produce and how to apply them.
   */
  addToFlush(p: Pipeline, modules: Modules): { count: number; apply(replies: unknown[]): void } {
    let count = 1;
    // Not anchored: the newest entry only (nothing is promoted yet, so older writes do not matter).
    const anchoring = this.cursor === undefined;
    if (anchoring) p.xrevrange(keys.cacheWrites(), "+", "-", 1);
    else p.xrange(keys.cacheWrites(), `(${this.cursor}`, "+", WRITE_LOG_BATCH);
    // After skipped flushes: the oldest entry too, to tell whether the log was trimmed past the cursor.
    const checkTrim = !anchoring && this.skipped;
    if (checkTrim) {
      p.xrange(keys.cacheWrites(), "-", "+", 1);
      count++;
    }
    this.skipped = false;
    const reported: { name: string; id: string; reads: number }[] = [];
    for (const m of modules) for (const r of m.takeReport()) reported.push({ name: m.name, id: r.id, reads: r.reads });
    reported.sort((a, b) => b.reads - a.reads);
    const top = reported.slice(0, this.rule.reportTop);
    if (top.length > 0) {
      const minute = Math.floor(this.now() / 60_000);
      const sum = keys.cacheHot(minute);
      const by = keys.cacheHotBy(minute);
      for (const r of top) {
        p.zincrby(sum, r.reads, `${r.name}:${r.id}`);
        p.zincrby(by, r.reads, `${this.isolateId}|${r.name}:${r.id}`);
      }
      p.expire(sum, REPORT_KEEP_SECONDS);
      p.expire(by, REPORT_KEEP_SECONDS);
      count += 2 * top.length + 2;
    }
    return {
      count,
      apply: (replies) => {
        const log = (replies[0] ?? {}) as Record<string, { k?: unknown }>;
        const ids = Object.keys(log);
        if (checkTrim) {
          const oldest = Object.keys((replies[1] ?? {}) as Record<string, unknown>)[0];
          // Entries between the cursor and the oldest kept one may be gone (trimmed): assume any key
          // was written. Conservative: also true when there simply were none.
          if (oldest !== undefined && this.cursor !== undefined && streamIdAfter(oldest, this.cursor))
            for (const m of modules) m.demoteAll();
        }
        if (anchoring) {
          this.cursor = ids[0] ?? "0-0";
          this.ready = true;
          return;
        }
        if (ids.length === 0) {
          this.ready = true;
          return;
        }
        const byModule = new Map<string, string[]>();
        for (const entryId of ids) {
          const k = log[entryId]?.k;
          if (typeof k !== "string") continue;
          const colon = k.indexOf(":");
          if (colon < 0) continue;
          const name = k.slice(0, colon);
          let list = byModule.get(name);
          if (!list) byModule.set(name, (list = []));
          list.push(k.slice(colon + 1));
        }
        for (const m of modules) {
          const list = byModule.get(m.name);
          if (list) m.invalidate(list);
        }
        // A full batch may hide more entries than it shows: demote everything; the next flush reads on.
        if (ids.length >= WRITE_LOG_BATCH) for (const m of modules) m.demoteAll();
        this.cursor = ids[ids.length - 1];
        this.ready = true;
      },
    };
  }

  /**
   * The flush skipped the write log (no cache reads, nothing promoted). The cursor is kept; the
   * next read also checks that the log was not trimmed past it meanwhile (WRITE_LOG_MAX writes).
   */
  idle(): void {
    this.skipped = true;
  }

  /**
   * The flush failed: a write may be unseen, so every promoted key goes back to its module's TTL
   * and none is promoted until a flush re-anchors the cursor (older writes no longer matter then).
   */
  failed(modules: Modules): void {
    this.ready = false;
    this.cursor = undefined;
    for (const m of modules) m.demoteAll();
  }

  /** The operator view: the current and previous minute merged, hottest first. */
  async report(deps: Deps, modules: Modules, limit = 50): Promise<HotReport> {
    const minute = Math.floor(this.now() / 60_000);
    const minutes = [minute - 1, minute];
    const p = deps.redis.pipeline();
    for (const m of minutes) {
      p.zrange(keys.cacheHot(m), 0, 999, { rev: true, withScores: true });
      p.zrange(keys.cacheHotBy(m), 0, 9_999, { rev: true, withScores: true });
    }
    const res = (await p.exec()) as (string | number)[][];
    const reads = new Map<string, number>();
    const isolates = new Map<string, Set<string>>();
    for (let i = 0; i < minutes.length; i++) {
      const sums = res[2 * i] ?? [];
      for (let j = 0; j + 1 < sums.length; j += 2)
        reads.set(String(sums[j]), (reads.get(String(sums[j])) ?? 0) + Number(sums[j + 1]));
      const by = res[2 * i + 1] ?? [];
      for (let j = 0; j + 1 < by.length; j += 2) {
        const member = String(by[j]);
        const bar = member.indexOf("|");
        if (bar < 0) continue;
        const key = member.slice(bar + 1);
        let set = isolates.get(key);
        if (!set) isolates.set(key, (set = new Set()));
        set.add(member.slice(0, bar));
      }
    }
    const split = (k: string) => {
      const colon = k.indexOf(":");
      return { module: k.slice(0, colon), key: k.slice(colon + 1) };
    };
    const top = [...reads]
      .sort((a, b) => b[1] - a[1])
      .slice(0, limit)
      .map(([k, n]) => ({ ...split(k), reads: n, isolates: isolates.get(k)?.size ?? 0 }));
    const promotedHere: { module: string; key: string }[] = [];
    for (const m of modules) for (const id of m.promotedKeys()) promotedHere.push({ module: m.name, key: id });
    return { rule: this.rule, minutes, top, promotedHere };
  }
}

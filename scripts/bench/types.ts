/**
 * The contract between the bench runner (run.ts) and scenarios (scenarios/*.ts).
 *
 * A scenario is one measured thing. Scenarios in the same `group` are measured side by side and
 * compared against the group's single `baseline: true` scenario, because on this shared 2-core
 * machine absolute numbers drift from run to run while ratios measured in the same run hold.
 *
 * To add a scenario, drop one file into scripts/bench/scenarios/ whose default export is a
 * `Scenario` (or an array of them) — see scripts/bench/README.md. The runner discovers it by itself.
 */

/** Extra per-scenario numbers shown as additional table columns (e.g. REST round trips per command). */
export type Extras = Record<string, number>;

/** What one measured window produced. Latencies are milliseconds. */
export interface Measurement {
  /** Completed operations (HTTP responses or driver ops) in the window, errors included. */
  requests: number;
  /** Failed operations: non-2xx/3xx or socket errors for wrk, thrown/rejected ops for drivers. */
  errors: number;
  /** Length of the window actually measured, seconds. */
  durationS: number;
  /** Operations per second. */
  rps: number;
  p50Ms: number;
  p99Ms: number;
  /**
   * CPU time of the runner and its child processes (not wrk) per op, µs. Filled in by the
   * runner from /proc; scenarios leave it out.
   */
  cpuUsPerOp?: number;
  extras?: Extras;
}

/** Settings and services the runner gives every scenario. */
export interface BenchContext {
  /** Length of one measured window (one round), milliseconds. */
  durationMs: number;
  /** Concurrent connections (wrk -c) / concurrent loops of an in-process driver. */
  connections: number;
  /** wrk threads (-t). */
  threads: number;
  /** A private temporary directory, deleted when the run ends. */
  tmpDir: string;
  /** Writes a line to stderr without breaking the progress bar. */
  log(message: string): void;
  /**
   * A resource shared by several scenarios of a run (one redis-server for a whole group, say):
   * `start` runs once per key, and the runner calls `stop` after the last group has finished.
   */
  shared<T>(key: string, start: () => Promise<SharedResource<T>>): Promise<T>;
}

export interface SharedResource<T> {
  value: T;
  stop(): Promise<void>;
}

/** An HTTP endpoint that the runner loads with wrk, a separate process. */
export interface HttpTarget {
  kind: "http";
  /** Loopback URL only (http://127.0.0.1:PORT/...). */
  url: string;
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  /**
   * Path to a wrk Lua script for dynamic requests (rotating ids, per-connection state, ...).
   * When given, `method`/`headers`/`body` are ignored: the script owns the request.
   */
  luaScript?: string;
  /** Arguments for `luaScript` (wrk passes what follows `--` to the script's init(args)). */
  luaArgs?: string[];
  /** wrk -c for this target, whatever --connections says (e.g. the seckill crowd of 200). */
  connections?: number;
  /** Runs before each measured window (not warm-up), e.g. to reset server-side counters. */
  beforeRound?(): Promise<void>;
  /** Runs after each measured window; the numbers become extra table columns. */
  afterRound?(): Promise<Extras>;
  /** Stops everything `setup` started. Called once, also after failures. */
  teardown(): Promise<void>;
}

export interface RunOptions {
  durationMs: number;
  /** Concurrent closed loops (callers). */
  concurrency: number;
  /** True for the warm-up window, whose result is thrown away. */
  warmup: boolean;
}

/** A non-HTTP measurement (raw Redis protocol, an SDK call, ...) driven in-process. */
export interface RunTarget {
  kind: "run";
  /** Measures one window. Must return within about `durationMs` plus a few seconds. */
  run(opts: RunOptions): Promise<Measurement>;
  teardown(): Promise<void>;
}

export type Target = HttpTarget | RunTarget;

export interface Scenario {
  /** Unique across all scenarios; used by --only. Keep it short: it labels a table row and a bar. */
  name: string;
  /** Scenarios of a group share one baseline and are measured interleaved. */
  group: string;
  /**
   * A name for several groups at once: `--only <set>` selects every scenario of the set (e.g.
   * "runtimes": the groups runtime-bun, runtime-workerd and runtime-deno). Optional.
   */
  set?: string;
  /** Exactly one scenario per group is the baseline (ratio 1.00). */
  baseline?: boolean;
  /**
   * Further same-round ratios, each a table column: the median over rounds of this scenario's rps
   * ÷ the named scenario's rps in the same round (same group, so measured interleaved), e.g.
   * `{ scenario: "seckill-hello", column: "÷ hello" }` for a row whose group baseline is something else.
   */
  ratioTo?: Array<{ scenario: string; column: string }>;
  /** One line for the report: what is measured. */
  description: string;
  /** Starts what the scenario needs (servers, data) and says how to load it. */
  setup(ctx: BenchContext): Promise<Target>;
}

/** Identity helper so a scenario file gets type checking without naming the type. */
export function defineScenario(s: Scenario): Scenario {
  return s;
}

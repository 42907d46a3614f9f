/**
 * Deadlines and circuit breakers, one `Guard` per dependency per isolate (`deps.isolate.resilience`),
 * hooked in at each SDK's transport, so no call site changes.
 * Deadline: the p99 of recent answer times × DEADLINE_FACTOR, between DEADLINE_FLOOR_MS and the
 * dependency's `*_TIMEOUT_MS` ceiling; extended once to the ceiling when the caller may have been
 * queued or our own event loop starved. Breaker: opens on BREAKER_FAILURE_RATIO of at least
 * BREAKER_MIN_CALLS failures over BREAKER_WINDOW_MS (or a run of failures with no answer between),
 * refuses for BREAKER_HALF_OPEN_AFTER_MS, then lets BREAKER_HALF_OPEN_CALLS probes through.
 * Invariant: a deadline missed while queued or starved never counts as the dependency failing; a
 * command or SQL error is an answer. Every failure leaves as `DependencyUnavailableError` (503 +
 * Retry-After). Details: docs/modules.md "resilience.ts"; decision and measurements:
 * docs/decisions/deadlines-and-breakers.md.
 */
import { QstashError } from "@upstash/qstash";
import { errors as redisErrors, type Redis } from "@upstash/redis";
import type { Config } from "./env.ts";

import { tripScope } from "./util/trips.ts";
import { scrubbedMessage } from "./util/scrub.ts";

/**
 * @upstash/ratelimit's own `timeout` (5 s by default) *allows* the request when Redis is slow (fail
 * open). 0 turns it off: its calls then run under our Redis deadline and a slow Redis is a 503,
 * never a free pass past a limit. Every Ratelimit of the app sets it.
 */
export const RATELIMIT_FAIL_CLOSED = 0;

export type DependencyName = "redis" | "mysql" | "qstash" | "sms" | "payments";
export const DEPENDENCIES: readonly DependencyName[] = ["redis", "mysql", "qstash", "sms", "payments"];

/** "isolated" is kept in the type for the operator contract; this module never produces it. */
export type BreakerStateName = "closed" | "open" | "halfOpen" | "isolated";

/** A deadline's timer this late (and at least half the deadline) means our event loop was starved, ms. */
const STARVED_MIN_MS = 50;
/** Answers remembered for the deadline's percentile, and how many are needed before it is used. */
const LATENCY_SAMPLES = 128;
const LATENCY_MIN_SAMPLES = 8;
/** The percentile is recomputed at least every this many answers (a sort of ≤ 128 numbers). */
const LATENCY_REFRESH_EVERY = 16;
/** Buckets of the breaker's window. */
const WINDOW_BUCKETS = 10;

/**
 * The caller's own AbortSignal ended the call (a transaction's deadline, src/db/transaction.ts):
 * the caller gave up, the dependency did not fail, so the breaker counts it as neither.
 */
export class CallerAbortedError extends Error {
  constructor(cause: unknown) {
    super("the caller abandoned the call", { cause });
    this.name = "CallerAbortedError";
  }
}

/** Why a call to a dependency did not get an answer. */
export type UnavailableReason = "open" | "timeout" | "failed";

export class DependencyUnavailableError extends Error {
  constructor(
    readonly dependency: DependencyName,
    readonly reason: UnavailableReason,
    /** Until the next probe may run, ms (≥ 0): the `Retry-After` a caller is given. */
    readonly retryAfterMs: number,
    cause?: unknown,
    /** Set when a non-core feature was switched off on purpose (it never called the dependency). */
    readonly feature?: string,
  ) {
    super(
      feature !== undefined
        ? `${feature} is switched off while ${dependency} is unavailable (circuit open)`
        : reason === "open"
          ? `${dependency} unavailable (circuit open)`
          : reason === "timeout"
            ? `${dependency} unavailable (timed out)`
            : `${dependency} unavailable (${scrubbedMessage(cause)})`,
      { cause },
    );
    this.name = "DependencyUnavailableError";
  }
}

/** A call's deadline passed. `excused`: the dependency answered others meanwhile, or our loop was starved. */
export class DeadlineExceeded extends Error {
  constructor(
    readonly waitedMs: number,
    readonly excused: "queued" | "starved" | undefined,
  ) {
    super(
      `timed out after ${Math.round(waitedMs)} ms${
        excused === "starved"
          ? " (the event loop was busy)"
          : excused === "queued"
            ? " (the dependency was answering other calls)"
            : ""
      }`,
    );
    this.name = "DeadlineExceeded";
  }
}

/** What /health and /admin/resilience show per dependency. */
export interface GuardSnapshot {
  state: BreakerStateName;
  /** The deadline a call starting now gets, ms (before any extension). */
  timeoutMs: number;
  /** The longest a call may wait (the dependency's `*_TIMEOUT_MS`), ms. */
  ceilingMs: number;
  /** Rolling p99 of recent answer times, ms; null until enough answers are known. */
  p99Ms: number | null;
  /** Calls started (including those refused while open). */
  calls: number;
  /** Calls waiting for an answer now. */
  inFlight: number;
  /** Failed calls: unexcused timeouts + other failures. */
  failures: number;
  /** Deadlines missed, excused or not. */
  timeouts: number;
  /** Calls refused without calling (open, or half-open with its probes taken). */
  rejected: number;
  /** Times the breaker opened. */
  opened: number;
  /** Of `timeouts`: missed while this isolate's event loop was busy (not failures). */
  starved: number;
  /** Of `timeouts`: missed while the dependency answered other calls (we were queued; not failures). */
  queued: number;
  /** Deadlines extended to the ceiling (queued or starved callers given more time). */
  extended: number;
  /** Epoch ms of the last opening, or null. */
  lastOpenedAt: number | null;
  /** The last failure's message, or null. */
  lastFailure: string | null;
  /** Seconds until a probe may run (0 unless open). */
  retryAfterSeconds: number;
}

export interface GuardOptions {
  /** Ceiling of the deadline, ms: the longest any call waits. */
  timeoutMs: number;
  /** Floor of the adaptive deadline, ms (capped at the ceiling). Default: the ceiling (a fixed deadline). */
  floorMs?: number;
  /** Deadline = p99 of recent answers × this. Default 4. */
  factor?: number;
  /** Calls that must have ended in the window before the ratio may open the breaker. */
  minCalls: number;
  /** Failed share of the window's calls that opens the breaker, 0 < r ≤ 1. Default 0.5. */
  failureRatio?: number;
  /** The breaker's window, ms. Default 5,000. */
  windowMs?: number;
  halfOpenAfterMs: number;
  /** Probes admitted at once while half-open, and successes that close it. Default 1. */
  halfOpenCalls?: number;
  /** Which thrown errors are the dependency failing (the rest are answers). Default: all. */
  isFailure?: (err: unknown) => boolean;
  /** Wall clock, epoch ms (breaker window, open period, Retry-After). */
  now?: () => number;
}

/** The last LATENCY_SAMPLES answer times, ms, and their p99 (recomputed every LATENCY_REFRESH_EVERY). */
class LatencyWindow {
  private readonly samples = new Float64Array(LATENCY_SAMPLES);
  private added = 0;
  private p99Cache: number | null = null;

  add(ms: number): void {
    this.samples[this.added % LATENCY_SAMPLES] = ms;
    this.added++;
    // A sample above the cached p99 may raise it: recomputed at once, so a deadline follows a slower
    // dependency on the next call; a faster one is followed within LATENCY_REFRESH_EVERY answers.
    if (this.p99Cache === null || ms > this.p99Cache || this.added % LATENCY_REFRESH_EVERY === 0) this.p99Cache = null;
  }

  /** null until LATENCY_MIN_SAMPLES answers are known. */
  p99(): number | null {
    const n = Math.min(this.added, LATENCY_SAMPLES);
    if (n < LATENCY_MIN_SAMPLES) return null;
    if (this.p99Cache === null) {
      const sorted = Array.from(this.samples.subarray(0, n)).sort((a, b) => a - b);
      this.p99Cache = sorted[Math.min(n - 1, Math.ceil(n * 0.99) - 1)] as number;
    }
    return this.p99Cache;
  }
}

/** Calls ended and failed over a sliding window of WINDOW_BUCKETS buckets. */
class OutcomeWindow {
  private readonly calls = new Int32Array(WINDOW_BUCKETS);
  private readonly failures = new Int32Array(WINDOW_BUCKETS);
  private readonly stamps = new Float64Array(WINDOW_BUCKETS).fill(-1);
  private readonly bucketMs: number;

  constructor(windowMs: number) {
    this.bucketMs = Math.max(1, windowMs / WINDOW_BUCKETS);
  }

  /** `weight`: the calls one request stood for (a pipeline of N commands is N calls). */
  record(now: number, failed: boolean, weight = 1): void {
    const b = Math.floor(now / this.bucketMs);
    const slot = ((b % WINDOW_BUCKETS) + WINDOW_BUCKETS) % WINDOW_BUCKETS;
    if (this.stamps[slot] !== b) {
      this.stamps[slot] = b;
      this.calls[slot] = 0;
      this.failures[slot] = 0;
    }
    this.calls[slot] = (this.calls[slot] as number) + weight;
    if (failed) this.failures[slot] = (this.failures[slot] as number) + weight;
  }

  totals(now: number): { calls: number; failures: number } {
    const b = Math.floor(now / this.bucketMs);
    let calls = 0;
    let failures = 0;
    for (let i = 0; i < WINDOW_BUCKETS; i++) {
      const s = this.stamps[i] as number;
      if (s > b - WINDOW_BUCKETS && s <= b) {
        calls += this.calls[i] as number;
        failures += this.failures[i] as number;
      }
    }
    return { calls, failures };
  }

  reset(): void {
    this.stamps.fill(-1);
  }
}

type State = "closed" | "open" | "halfOpen";

/** One dependency's deadline + breaker in one isolate. */
export class Guard {
  private readonly counters = {
    calls: 0,
    failures: 0,
    timeouts: 0,
    rejected: 0,
    opened: 0,
    starved: 0,
    queued: 0,
    extended: 0,
  };
  private readonly latency = new LatencyWindow();
  private readonly outcomes: OutcomeWindow;
  private readonly now: () => number;
  private readonly floorMs: number;
  private readonly factor: number;
  private readonly failureRatio: number;
  private readonly halfOpenCalls: number;
  /** Failures in a row, with no answer between, that open the breaker (a third of minCalls). */
  private readonly streakToOpen: number;
  private breakerState: State = "closed";
  private lastOpenedAt: number | null = null;
  private lastFailure: string | null = null;
  /** Answers (successes and the dependency's own errors) so far: progress seen by waiting callers. */
  private answers = 0;
  /** Counted failures since the last answer. */
  private failureStreak = 0;
  private inFlight = 0;
  private probesInFlight = 0;
  private probeSuccesses = 0;

  constructor(
    readonly name: DependencyName,
    readonly opts: GuardOptions,
  ) {
    this.now = opts.now ?? Date.now;
    this.floorMs = Math.min(opts.floorMs ?? opts.timeoutMs, opts.timeoutMs);
    this.factor = opts.factor ?? 4;
    this.failureRatio = opts.failureRatio ?? 0.5;
    this.halfOpenCalls = Math.max(1, opts.halfOpenCalls ?? 1);
    this.streakToOpen = Math.max(1, Math.ceil(opts.minCalls / 3));
    this.outcomes = new OutcomeWindow(opts.windowMs ?? 5_000);
  }

  /** The deadline a call starting now gets, ms. */
  deadlineMs(): number {
    const p99 = this.latency.p99();
    if (p99 === null) return this.opts.timeoutMs;
    return Math.min(this.opts.timeoutMs, Math.max(this.floorMs, Math.ceil(p99 * this.factor)));
  }

  /**
   * `fn` with a deadline: when it passes, the signal is aborted (the transport lets go of its
   * socket) and the caller is rejected at once, unless the wait is extended (see the file comment).
   */
  private withDeadline<T>(fn: (signal: AbortSignal) => Promise<T>, ctrl: AbortController): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const started = performance.now();
      const first = this.deadlineMs();
      let seen = this.answers;
      let excused: "queued" | "starved" | undefined;
      let timer: ReturnType<typeof setTimeout>;
      const expire = (dueMs: number, final: boolean) => () => {
        const waited = performance.now() - started;
        const late = waited - dueMs;
        // Queued: answers came meanwhile, or (at the first deadline) other calls are in flight with
        // this one — a crowd's answers arrive in waves, and one wave may be longer than a deadline
        // learned before the crowd came. Starved: our own timer ran late.
        // Being in a crowd excuses a miss only while there is an extension to give: at the ceiling
        // only an answer (or our own starvation) says the dependency is not hung.
        const canExtend = !final && this.opts.timeoutMs > first;
        const why =
          this.answers > seen || (canExtend && this.inFlight > 1)
            ? "queued"
            : late > Math.max(STARVED_MIN_MS, dueMs / 2)
              ? "starved"
              : undefined;
        if (canExtend && why !== undefined) {
          excused = why;
          seen = this.answers;
          this.counters.extended++;
          timer = setTimeout(expire(this.opts.timeoutMs, true), Math.max(1, this.opts.timeoutMs - waited));
          return;
        }
        reject(new DeadlineExceeded(waited, why ?? (final ? undefined : excused)));
        ctrl.abort();
      };
      timer = setTimeout(expire(first, false), first);
      fn(ctrl.signal).then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (err: unknown) => {
          clearTimeout(timer);
          reject(err);
        },
      );
    });
  }

  get state(): BreakerStateName {
    if (this.breakerState === "open" && this.probeDue()) return "halfOpen";
    return this.breakerState;
  }

  /** Open or probing: non-core features should not call the dependency now. */
  get degraded(): boolean {
    return this.breakerState !== "closed";
  }

  private probeDue(): boolean {
    return this.lastOpenedAt === null || this.now() >= this.lastOpenedAt + this.opts.halfOpenAfterMs;
  }

  /** ms until a probe may run: the rest of the open period (at least 1 s when not closed). */
  retryAfterMs(): number {
    if (this.breakerState === "closed") return 0;
    const left =
      this.lastOpenedAt === null
        ? this.opts.halfOpenAfterMs
        : this.lastOpenedAt + this.opts.halfOpenAfterMs - this.now();
    // Clamped: an injected clock that jumps (tests) must not make Retry-After 0 or absurd.
    return Math.min(Math.max(1000, left), Math.max(1000, this.opts.halfOpenAfterMs));
  }

  /** The error a caller gets when this dependency is skipped on purpose (degraded feature). */
  unavailable(feature?: string): DependencyUnavailableError {
    return new DependencyUnavailableError(this.name, "open", this.retryAfterMs(), undefined, feature);
  }

  private open(): void {
    this.breakerState = "open";
    this.lastOpenedAt = this.now();
    this.counters.opened++;
    this.probesInFlight = 0;
    this.probeSuccesses = 0;
  }

  private succeeded(ms: number, probe: boolean, weight: number): void {
    this.answers++;
    this.failureStreak = 0;
    this.latency.add(ms);
    this.outcomes.record(this.now(), false, weight);
    if (probe && this.breakerState === "halfOpen" && ++this.probeSuccesses >= this.halfOpenCalls) {
      this.breakerState = "closed";
      this.outcomes.reset();
    }
  }

  private failed(message: string, probe: boolean, weight: number): void {
    this.counters.failures++;
    this.lastFailure = message;
    this.failureStreak += weight;
    if (this.breakerState === "halfOpen") {
      if (probe) this.open();
      return;
    }
    if (this.breakerState !== "closed") return;
    const now = this.now();
    this.outcomes.record(now, true, weight);
    const w = this.outcomes.totals(now);
    if (w.calls >= this.opts.minCalls && w.failures >= w.calls * this.failureRatio) this.open();
    // Failures in a row with no answer between them: every counted miss waited with nothing
    // answered (a crowd's misses are excused), so this is the dependency down or hung, however
    // little traffic there is (a hang thins the calls out: each waits its deadline).
    else if (this.failureStreak >= this.streakToOpen) this.open();
  }

  /**
   * Runs `fn` under the deadline and breaker. `fn` gets the AbortSignal to hand to its transport.
   * Rejects with DependencyUnavailableError for a timeout, a failure or an open breaker; other
   * errors (answers: command/SQL errors) pass through unchanged. `commands`: how many the call
   * carries (a Redis pipeline): the breaker weighs the call by it, and the request's trip count
   * reports it.
   */
  async run<T>(fn: (signal: AbortSignal) => Promise<T>, commands = 1): Promise<T> {
    this.counters.calls++;
    let probe = false;
    if (this.breakerState !== "closed") {
      if (this.breakerState === "open" && this.probeDue()) this.breakerState = "halfOpen";
      if (this.breakerState === "open" || this.probesInFlight >= this.halfOpenCalls) {
        this.counters.rejected++;
        throw this.unavailable();
      }
      probe = true;
      this.probesInFlight++;
    }
    this.inFlight++;
    const started = performance.now();
    // The request this call is made for (src/util/trips.ts: Server-Timing); none outside a request.
    const trips = tripScope.getStore();
    const depth = trips === undefined ? 0 : trips.begin();
    try {
      const value = await this.withDeadline(fn, new AbortController());
      this.succeeded(performance.now() - started, probe, commands);
      return value;
    } catch (err) {
      if (err instanceof DeadlineExceeded) {
        this.counters.timeouts++;
        if (err.excused === "starved") this.counters.starved++;
        else if (err.excused === "queued") this.counters.queued++;
        else {
          // No answer says whether the dependency is hung or merely farther than it was: the wait
          // joins the samples, so the next deadline is a multiple of it and a moved dependency is
          // followed after one miss (a hang meets the ratio and opens the breaker).
          this.latency.add(err.waitedMs);
          this.failed(err.message, probe, commands);
        }
        throw new DependencyUnavailableError(this.name, "timeout", this.retryAfterMs(), err);
      }
      if (err instanceof CallerAbortedError) throw err;
      if (this.opts.isFailure?.(err) ?? true) {
        this.failed(scrubbedMessage(err), probe, commands);
        throw new DependencyUnavailableError(this.name, "failed", this.retryAfterMs(), err);
      }
      // An answer (a command or SQL error): the dependency is up.
      this.succeeded(performance.now() - started, probe, commands);
      throw err;
    } finally {
      this.inFlight--;
      if (probe) this.probesInFlight = Math.max(0, this.probesInFlight - 1);
      trips?.end(this.name, depth, performance.now() - started, commands);
    }
  }

  /**
   * `base` guarded: the whole exchange (headers and body) runs under the deadline, the body is read
   * inside it and handed on buffered (these dependencies answer small JSON). A 5xx is returned to
   * the SDK as is (it makes its own error) but counts as a failure.
   */
  fetch(base?: typeof fetch): typeof fetch {
    const guarded = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      let status = 0;
      try {
        return await this.run(async (signal) => {
          let res: Response;
          let body: ArrayBuffer;
          try {
            // The global fetch is looked up per call (a test or bench may wrap it after createDeps).
            res = await (base ?? fetch)(input, {
              ...init,
              signal: init?.signal ? AbortSignal.any([init.signal, signal]) : signal,
            });
            body = await res.arrayBuffer();
          } catch (err) {
            // Given up by the caller's own signal (not our deadline): not the dependency failing.
            if (init?.signal?.aborted && !signal.aborted) throw new CallerAbortedError(err);
            throw err;
          }
          status = res.status;
          const copy = new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
          if (res.status >= 500) throw new HttpStatusError(res.status, copy);
          return copy;
        });
      } catch (err) {
        const cause = err instanceof DependencyUnavailableError ? err.cause : undefined;
        // The breaker saw the failure; the SDK gets the response it would have got.
        if (cause instanceof HttpStatusError && status >= 500) return cause.response;
        throw err;
      }
    };
    return guarded as typeof fetch;
  }

  snapshot(): GuardSnapshot {
    const p99 = this.latency.p99();
    return {
      state: this.state,
      timeoutMs: this.deadlineMs(),
      ceilingMs: this.opts.timeoutMs,
      p99Ms: p99 === null ? null : Math.round(p99 * 100) / 100,
      ...this.counters,
      inFlight: this.inFlight,
      lastOpenedAt: this.lastOpenedAt,
      lastFailure: this.lastFailure,
      retryAfterSeconds: this.degraded ? Math.ceil(this.retryAfterMs() / 1000) : 0,
    };
  }
}

/** A 5xx answer, thrown inside the guard so the breaker counts it; its response is handed on. */
class HttpStatusError extends Error {
  constructor(
    readonly status: number,
    readonly response: Response,
  ) {
    super(`HTTP ${status}`);
    this.name = "HttpStatusError";
  }
}

/**
 * A Redis database over its command budget ("ERR max … limit exceeded": the per-second, daily or
 * monthly limit). The request was refused before any command ran, so it is neither a failure of
 * the database (the breaker ignores it) nor a result: callers answer 503 with Retry-After.
 */
export function isRedisThrottled(err: unknown): boolean {
  for (let e = err, i = 0; i < 4 && e instanceof Error; i++, e = e.cause) {
    if (e instanceof redisErrors.UpstashError && /\bERR max [a-z ]*limit exceeded/i.test(e.message)) return true;
  }
  return false;
}

/**
 * A full Redis database with eviction off ("OOM command not allowed when used memory >
 * 'maxmemory'"): Redis refused the write before it ran (a script is refused at its first write,
 * so none of it ran), so it is a definite "no", not a lost reply. Callers answer 503 with
 * Retry-After; nothing was acknowledged (docs/decisions/redis-eviction.md).
 */
export function isRedisFull(err: unknown): boolean {
  for (let e = err, i = 0; i < 4 && e instanceof Error; i++, e = e.cause) {
    if (e instanceof redisErrors.UpstashError && /\bOOM command not allowed\b/.test(e.message)) return true;
  }
  return false;
}

/**
 * Errors in Upstash's JSON envelope that say the database could not serve at all (the REST API
 * answers 500 when it cannot reach Redis; a replica loading or a cluster without a primary): the
 * SDK drops the HTTP status, so they are told apart from command errors by their text.
 */
const REDIS_CANNOT_SERVE =
  /\b(redis unavailable|LOADING|MASTERDOWN|CLUSTERDOWN|ECONNREFUSED|connection (refused|reset|closed))\b/;

/**
 * Redis: the server answered when the SDK could parse Upstash's JSON error (`UpstashError` — a
 * command error such as NOSCRIPT is part of normal script loading), unless that error says it
 * could not serve; a reply it could not parse (`UpstashJSONParseError`, e.g. a gateway's HTML
 * 502), a network error or a timeout is Redis failing.
 */
export function isRedisFailure(err: unknown): boolean {
  return (
    !(err instanceof redisErrors.UpstashError) ||
    err instanceof redisErrors.UpstashJSONParseError ||
    REDIS_CANNOT_SERVE.test(err.message)
  );
}

/**
 * QStash: an error with a status below 500 (a refused message, a quota) or none (the SDK's own
 * validation) is QStash answering; a 5xx, a network error or a timeout is QStash failing.
 */
export function isQstashFailure(err: unknown): boolean {
  return !(err instanceof QstashError) || (typeof err.status === "number" && err.status >= 500);
}

export type Resilience = Record<DependencyName, Guard>;

type ResilienceConfig = Pick<
  Config,
  | "REDIS_TIMEOUT_MS"
  | "MYSQL_TIMEOUT_MS"
  | "QSTASH_TIMEOUT_MS"
  | "SMS_TIMEOUT_MS"
  | "PAYMENTS_TIMEOUT_MS"
  | "DEADLINE_FLOOR_MS"
  | "DEADLINE_FACTOR"
  | "BREAKER_MIN_CALLS"
  | "BREAKER_FAILURE_RATIO"
  | "BREAKER_WINDOW_MS"
  | "BREAKER_HALF_OPEN_AFTER_MS"
  | "BREAKER_HALF_OPEN_CALLS"
>;

function guardOptions(
  config: ResilienceConfig,
  ceilingMs: number,
  now: () => number,
  isFailure?: (err: unknown) => boolean,
): GuardOptions {
  return {
    timeoutMs: ceilingMs,
    floorMs: config.DEADLINE_FLOOR_MS,
    factor: config.DEADLINE_FACTOR,
    minCalls: config.BREAKER_MIN_CALLS,
    failureRatio: config.BREAKER_FAILURE_RATIO,
    windowMs: config.BREAKER_WINDOW_MS,
    halfOpenAfterMs: config.BREAKER_HALF_OPEN_AFTER_MS,
    halfOpenCalls: config.BREAKER_HALF_OPEN_CALLS,
    isFailure,
    now,
  };
}

export function createResilience(config: ResilienceConfig, now: () => number = Date.now): Resilience {
  const guard = (name: DependencyName, ceilingMs: number, isFailure?: (err: unknown) => boolean) =>
    new Guard(name, guardOptions(config, ceilingMs, now, isFailure));
  return {
    redis: guard("redis", config.REDIS_TIMEOUT_MS, isRedisFailure),
    mysql: guard("mysql", config.MYSQL_TIMEOUT_MS),
    qstash: guard("qstash", config.QSTASH_TIMEOUT_MS, isQstashFailure),
    sms: guard("sms", config.SMS_TIMEOUT_MS),
    payments: guard("payments", config.PAYMENTS_TIMEOUT_MS),
  };
}

/**
 * The guard of one seckill shard database (or of the read region): a deadline and breaker of its
 * own, so a failing shard fails its own buyers' attempts fast without opening the main Redis
 * breaker (sessions, caches, everything else) — or the other shards'.
 */
export function createShardGuard(config: ResilienceConfig, now: () => number = Date.now): Guard {
  return new Guard("redis", guardOptions(config, config.REDIS_TIMEOUT_MS, now, isRedisFailure));
}

export function resilienceSnapshot(r: Resilience): Record<DependencyName, GuardSnapshot> {
  return Object.fromEntries(DEPENDENCIES.map((d) => [d, r[d].snapshot()])) as Record<DependencyName, GuardSnapshot>;
}

/**
 * Puts `guard` around every HTTP request of an @upstash/redis client. The SDK, given an aborted
 * AbortSignal object, answers a fake 200 whose result is the abort reason; the timeout's
 * rejection (withDeadline) reaches the caller first, and a reply that arrives after the deadline is
 * dropped, so that fake result never reaches a caller.
 */
export function guardRedis(redis: Redis, guard: Guard): Redis {
  redis.use((req, next) =>
    guard.run(async (signal) => {
      const res = await next({ ...req, signal });
      // (The timeout's own rejection has already reached the caller; this only discards the reply.)
      if (signal.aborted) throw new Error("redis request aborted after its timeout");
      return res;
    }, commandsIn(req.body)),
  );
  return redis;
}

/**
 * Commands one REST request carries: a `/pipeline` or `/multi-exec` body is an array of commands
 * (auto-pipelining merges concurrent callers into one), a single command is one. The breaker
 * counts them all, so a merged request that fails for thirty callers weighs thirty.
 */
function commandsIn(body: unknown): number {
  return Array.isArray(body) && body.length > 0 && Array.isArray(body[0]) ? body.length : 1;
}

/** The port's methods (QStash publish/batch) guarded one by one; other members are left as they are. */
export function guardMethods<T extends object, K extends keyof T>(port: T, methods: readonly K[], guard: Guard): T {
  const guarded = Object.create(port) as T;
  for (const m of methods) {
    const original = port[m] as unknown as (...args: unknown[]) => Promise<unknown>;
    (guarded as Record<K, unknown>)[m] = (...args: unknown[]) => guard.run(() => original.apply(port, args));
  }
  return guarded;
}

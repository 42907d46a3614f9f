/**
 * Timeouts and circuit breakers, one set per dependency per isolate (`deps.isolate.resilience`).
 *
 * Every call to Redis, MySQL, QStash, SMS and the payment provider runs through its dependency's
 * `Guard`: a cockatiel circuit breaker (ConsecutiveBreaker, BREAKER_THRESHOLD failures in a row
 * open it; one probe after BREAKER_HALF_OPEN_AFTER_MS closes or re-opens it) around a deadline
 * (the caller stops waiting at the timeout even if the transport ignores the abort; the
 * AbortSignal is also handed to fetch so the socket is let go). The guards sit at the
 * transport, so no call site changes:
 *   Redis    `redis.use` middleware around the SDK's HTTP request (every command, pipeline, script)
 *   MySQL    the `fetch` @planetscale/database is given
 *   QStash   the port's three methods (the SDK takes no fetch or signal); its own retries are off
 *   SMS, payments   the `fetch` they are given
 *
 * A failure is a timeout, a network error or a 5xx-ish answer that is not the dependency's own
 * (Redis: a reply that is not Upstash's JSON; QStash and HTTP: status ≥ 500). A Redis command error
 * (NOSCRIPT, WRONGTYPE) or an SQL error is an answer and counts as neither success nor failure.
 * Every failure leaves as `DependencyUnavailableError` (cause kept), which errors.ts turns into a
 * 503 envelope with `Retry-After`; an open breaker throws it without calling anything.
 *
 * While a breaker is open or probing, `degraded` is true: non-core features (feed, likes, sign-in,
 * UV counting) stop calling Redis at all (src/routes/*, services/uv.ts), reads serve L1/stale
 * (cache/module.ts falls through on any error), and the seckill path fails closed (503: no
 * reservation without Redis). In half-open state only the single probe runs; other callers fail
 * fast instead of queueing behind it (cockatiel would make them wait for the probe's verdict).
 *
 * Why cockatiel and a small wrapper: cockatiel is pure TypeScript and gives the breaker state
 * machine (the timeout is ten lines here: see withDeadline for why); what it lacks — the open time for `Retry-After`, counters for /health,
 * fail-fast while half-open, the error classification per SDK — is this file. cockatiel is loaded
 * with `import()` on a guard's first call, not statically: its module body aborts an
 * AbortController at top level, which workerd forbids in global scope ("Disallowed operation"),
 * so a static import kills the Worker at startup (tests/workerd/smoke.test.ts). Loaded from a
 * handler, it runs fine; until then a guard reads "closed" (nothing has failed yet).
 */
import { QstashError } from "@upstash/qstash";
import { errors as redisErrors, type Redis } from "@upstash/redis";
import type { CircuitBreakerPolicy } from "cockatiel";
import type { Config } from "./env.ts";

import { scrubbedMessage } from "./util/scrub.ts";

/**
 * @upstash/ratelimit's own `timeout` (5 s by default) *allows* the request when Redis is slow (fail
 * open). 0 turns it off: its calls then run under our Redis deadline (REDIS_TIMEOUT_MS, 250 ms) and
 * a slow Redis is a 503, never a free pass past a limit. Every Ratelimit of the app sets it.
 */
export const RATELIMIT_FAIL_CLOSED = 0;

export type DependencyName = "redis" | "mysql" | "qstash" | "sms" | "payments";
export const DEPENDENCIES: readonly DependencyName[] = ["redis", "mysql", "qstash", "sms", "payments"];

export type BreakerStateName = "closed" | "open" | "halfOpen" | "isolated";

/** A deadline's timer this late (and at least half the timeout) means our event loop was starved, ms. */
const STARVED_MIN_MS = 50;

/** A deadline missed because this isolate's event loop was busy, not because the dependency was slow. */
export class StarvedDeadline extends Error {
  constructor(
    readonly timeoutMs: number,
    readonly lateMs: number,
  ) {
    super(`timed out after ${timeoutMs} ms (the event loop was busy: the timer ran ${Math.round(lateMs)} ms late)`);
    this.name = "StarvedDeadline";
  }
}

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

/** What /health and /admin/resilience show per dependency. */
export interface GuardSnapshot {
  state: BreakerStateName;
  timeoutMs: number;
  /** Calls started (including those refused while open). */
  calls: number;
  /** Failed calls: timeouts + other failures. */
  failures: number;
  timeouts: number;
  /** Calls refused without calling (open, or half-open while the probe runs). */
  rejected: number;
  /** Times the breaker opened. */
  opened: number;
  /** Of `timeouts`: deadlines missed because this isolate's event loop was busy (not counted as failures). */
  starved: number;
  /** Epoch ms of the last opening, or null. */
  lastOpenedAt: number | null;
  /** The last failure's message, or null. */
  lastFailure: string | null;
  /** Seconds until a probe may run (0 unless open). */
  retryAfterSeconds: number;
}

/** cockatiel's CircuitState values (Closed 0, Open 1, HalfOpen 2, Isolated 3), by value. */
const STATE_NAMES: readonly BreakerStateName[] = ["closed", "open", "halfOpen", "isolated"];
const CLOSED = 0;
const HALF_OPEN = 2;

type Cockatiel = typeof import("cockatiel");

/** A guard's cockatiel objects, built on its first call (see the file comment). */
interface Policies {
  lib: Cockatiel;
  breaker: CircuitBreakerPolicy;
}

export interface GuardOptions {
  timeoutMs: number;
  threshold: number;
  halfOpenAfterMs: number;
  /** Which thrown errors are the dependency failing (the rest are answers). Default: all. */
  isFailure?: (err: unknown) => boolean;
  /** Wall clock, epoch ms (Retry-After, lastOpenedAt). cockatiel's breaker uses Date.now itself. */
  now?: () => number;
}

/** One dependency's timeout + breaker in one isolate. */
export class Guard {
  private policies: Policies | undefined;
  private readonly counters = { calls: 0, failures: 0, timeouts: 0, rejected: 0, opened: 0, starved: 0 };
  private lastOpenedAt: number | null = null;
  private lastFailure: string | null = null;
  private readonly now: () => number;

  constructor(
    readonly name: DependencyName,
    readonly opts: GuardOptions,
  ) {
    this.now = opts.now ?? Date.now;
  }

  private build(lib: Cockatiel): Policies {
    const isFailure = this.opts.isFailure ?? (() => true);
    // TaskCancelledError is the timeout's own: always a failure.
    const handled = lib.handleWhen(
      (err) =>
        !(err instanceof StarvedDeadline) &&
        !(err instanceof CallerAbortedError) &&
        (err instanceof lib.TaskCancelledError || isFailure(err)),
    );
    const breaker = lib.circuitBreaker(handled, {
      halfOpenAfter: this.opts.halfOpenAfterMs,
      breaker: new lib.ConsecutiveBreaker(this.opts.threshold),
    });
    breaker.onBreak(() => {
      this.counters.opened++;
      this.lastOpenedAt = this.now();
    });
    return { lib, breaker };
  }

  /**
   * `fn` with a deadline: at timeoutMs the signal is aborted (the transport lets go of its
   * socket) and the caller is rejected at once (whether or not the transport honours the abort).
   * Hand-written rather than cockatiel's `timeout(…, Aggressive)`, which does the same with a
   * derived AbortController, listeners, event emitters and an abort on every return: 4.3 µs per
   * call against ~1 µs here (in-process micro-measurement), and every Redis request pays it.
   */
  private withDeadline<T>(fn: (signal: AbortSignal) => Promise<T>, ctrl: AbortController, lib: Cockatiel): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const due = performance.now() + this.opts.timeoutMs;
      const timer = setTimeout(() => {
        // Our own event loop was starved (a CPU-heavy request, a GC pause) if the timer itself ran
        // far past its time: the dependency may well have answered and its reply wait behind us.
        // That is still a timeout for this caller, but not the dependency failing: the breaker
        // does not count it (issue 16: a flood of heavy bodies opened the Redis breaker).
        const late = performance.now() - due;
        const starved = late > Math.max(STARVED_MIN_MS, this.opts.timeoutMs / 2);
        reject(
          starved
            ? new StarvedDeadline(this.opts.timeoutMs, late)
            : new lib.TaskCancelledError(`timed out after ${this.opts.timeoutMs} ms`),
        );
        ctrl.abort();
      }, this.opts.timeoutMs);
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

  /**
   * Each caller awaits its own `import()` (the module registry makes the second one immediate):
   * a shared loading promise would let one request await a promise settled in another's context,
   * which workerd refuses (src/runtime.ts). The first to finish builds the policies; later ones
   * keep them (one breaker per guard).
   */
  private async load(): Promise<Policies> {
    const lib = await import("cockatiel");
    this.policies ??= this.build(lib);
    return this.policies;
  }

  /** cockatiel's CircuitState value; Closed until the first call has loaded cockatiel. */
  private get stateValue(): number {
    return this.policies ? this.policies.breaker.state : CLOSED;
  }

  get state(): BreakerStateName {
    return STATE_NAMES[this.stateValue] ?? "isolated";
  }

  /** Open, probing or isolated: non-core features should not call the dependency now. */
  get degraded(): boolean {
    return this.stateValue !== CLOSED;
  }

  /** ms until a probe may run: the rest of the open period (at least 1 s when not closed). */
  retryAfterMs(): number {
    if (this.stateValue === CLOSED) return 0;
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

  /**
   * Runs `fn` under the timeout and breaker. `fn` gets the AbortSignal to hand to its transport.
   * Rejects with DependencyUnavailableError for a timeout, a failure or an open breaker; other
   * errors (answers: command/SQL errors) pass through unchanged.
   */
  async run<T>(fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    this.counters.calls++;
    // cockatiel lets one call probe a half-open breaker and parks the others until its verdict
    // (up to a whole timeout): refuse them at once instead.
    if (this.stateValue === HALF_OPEN) {
      this.counters.rejected++;
      throw this.unavailable();
    }
    const p = this.policies ?? (await this.load());
    try {
      // The call's own signal goes to cockatiel too: its default is one module-level AbortSignal,
      // and workerd ties a signal to the request that created it ("Cannot perform I/O on behalf
      // of a different request"), so every later request would fail on that one.
      const ctrl = new AbortController();
      return await p.breaker.execute(() => this.withDeadline(fn, ctrl, p.lib), ctrl.signal);
    } catch (err) {
      if (err instanceof p.lib.BrokenCircuitError || err instanceof p.lib.IsolatedCircuitError) {
        this.counters.rejected++;
        throw this.unavailable();
      }
      if (err instanceof CallerAbortedError) throw err;
      if (err instanceof StarvedDeadline) {
        // Not a dependency failure: the breaker's policy does not handle it (isFailure below).
        this.counters.timeouts++;
        this.counters.starved++;
        throw new DependencyUnavailableError(this.name, "timeout", this.retryAfterMs(), err);
      }
      if (err instanceof p.lib.TaskCancelledError) {
        this.counters.failures++;
        this.counters.timeouts++;
        this.lastFailure = `timed out after ${this.opts.timeoutMs} ms`;
        throw new DependencyUnavailableError(this.name, "timeout", this.retryAfterMs(), err);
      }
      if (this.opts.isFailure?.(err) ?? true) {
        this.counters.failures++;
        this.lastFailure = scrubbedMessage(err);
        throw new DependencyUnavailableError(this.name, "failed", this.retryAfterMs(), err);
      }
      throw err;
    }
  }

  /**
   * `base` guarded: the whole exchange (headers and body) runs under the timeout, the body is read
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
    return {
      state: this.state,
      timeoutMs: this.opts.timeoutMs,
      ...this.counters,
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
 * Redis: the server answered when the SDK could parse Upstash's JSON error (`UpstashError` — a
 * command error such as NOSCRIPT is part of normal script loading); a reply it could not parse
 * (`UpstashJSONParseError`, e.g. a gateway's HTML 502), a network error or a timeout is Redis
 * failing.
 */
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

export function isRedisFailure(err: unknown): boolean {
  return !(err instanceof redisErrors.UpstashError) || err instanceof redisErrors.UpstashJSONParseError;
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
  | "BREAKER_THRESHOLD"
  | "BREAKER_HALF_OPEN_AFTER_MS"
>;

export function createResilience(config: ResilienceConfig, now: () => number = Date.now): Resilience {
  const guard = (name: DependencyName, timeoutMs: number, isFailure?: (err: unknown) => boolean) =>
    new Guard(name, {
      timeoutMs,
      threshold: config.BREAKER_THRESHOLD,
      halfOpenAfterMs: config.BREAKER_HALF_OPEN_AFTER_MS,
      isFailure,
      now,
    });
  return {
    redis: guard("redis", config.REDIS_TIMEOUT_MS, isRedisFailure),
    mysql: guard("mysql", config.MYSQL_TIMEOUT_MS),
    qstash: guard("qstash", config.QSTASH_TIMEOUT_MS, isQstashFailure),
    sms: guard("sms", config.SMS_TIMEOUT_MS),
    payments: guard("payments", config.PAYMENTS_TIMEOUT_MS),
  };
}

/**
 * The guard of one seckill shard database (issue 18): a deadline and breaker of its own, so a
 * failing shard fails its own buyers' attempts fast without opening the main Redis breaker
 * (sessions, caches, everything else) — or the other shards'.
 */
export function createShardGuard(config: ResilienceConfig, now: () => number = Date.now): Guard {
  return new Guard("redis", {
    timeoutMs: config.REDIS_TIMEOUT_MS,
    threshold: config.BREAKER_THRESHOLD,
    halfOpenAfterMs: config.BREAKER_HALF_OPEN_AFTER_MS,
    isFailure: isRedisFailure,
    now,
  });
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
    }),
  );
  return redis;
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

/**
 * Subrequest budgets: a Cloudflare Workers invocation (a request with its `waitUntil` work, or a
 * scheduled event) may make at most WORKERS_SUBREQUEST_LIMIT fetches; past it every fetch throws.
 * The loops whose length depends on data (order drain, close-expired, refund retry, sweep,
 * reconcile) run on *metered* ports: `metered(deps, budget)` charges one subrequest per HTTP request
 * a port makes and refuses a call that would pass the cap *before* sending it
 * (SubrequestBudgetExceeded); `hold(n)` / `unhold(n)` reserve a step's worst case, and a step that
 * does not fit is handed on (a continuation drain, the next cron run).
 * Invariant: a metered loop never pushes an invocation past the platform's limit. The cap keeps a
 * headroom (HEADROOM_SHARE, at least MIN_HEADROOM) for work outside the loops. Counting is exact on
 * workerd and over-counts (safely) on Bun and Deno. Details: docs/modules.md "ports/subrequests.ts".
 */
import type { Config } from "../env.ts";
import type { Deps } from "../deps.ts";
import { scriptsFor } from "../redis/scripts.ts";

/** Share of the limit kept out of metered loops, and its floor (see the file comment). */
export const HEADROOM_SHARE = 0.05;
export const MIN_HEADROOM = 4;
/**
 * The limit on workerd when WORKERS_SUBREQUEST_LIMIT is unset: Workers Paid's per-invocation limit
 * before the current limits page raised it to 10,000 — the lowest a paid plan has had.
 */
export const WORKERS_DEFAULT_SUBREQUESTS = 1000;

/** What the limit is read from: the config, and the runtime the entry declared (src/runtime.ts). */
export interface LimitSource {
  config: Pick<Config, "WORKERS_SUBREQUEST_LIMIT">;
  runtime?: { readonly name: string };
}

export function headroom(limit: number): number {
  return Math.max(MIN_HEADROOM, Math.ceil(limit * HEADROOM_SHARE));
}

/**
 * Subrequests one invocation may make: WORKERS_SUBREQUEST_LIMIT when set (on any runtime: tests
 * set it to exercise the caps on Bun); unset, WORKERS_DEFAULT_SUBREQUESTS on workerd and no limit
 * on Bun and Deno, which have none.
 */
export function subrequestLimit(d: LimitSource): number {
  return (
    d.config.WORKERS_SUBREQUEST_LIMIT ??
    (d.runtime?.name === "workerd" ? WORKERS_DEFAULT_SUBREQUESTS : Number.POSITIVE_INFINITY)
  );
}

/** What one invocation's metered loops may spend in all: the limit minus the headroom. */
export function invocationCap(d: LimitSource): number {
  const limit = subrequestLimit(d);
  return Number.isFinite(limit) ? limit - headroom(limit) : limit;
}

export class SubrequestBudgetExceeded extends Error {
  constructor(
    readonly cap: number,
    readonly spent: number,
    readonly wanted: number,
  ) {
    super(
      `subrequest budget of ${cap} spent (${spent} made, ${wanted} more wanted): the rest is left for the next invocation`,
    );
    this.name = "SubrequestBudgetExceeded";
  }
}

export class SubrequestBudget {
  private made = 0;
  private held = 0;

  constructor(readonly cap: number) {}

  /** The whole metered budget of one invocation (one drain delivery, one close message). */
  static forInvocation(d: LimitSource): SubrequestBudget {
    return new SubrequestBudget(invocationCap(d));
  }

  /** Subrequests made through the meter (and forced ones). */
  get spent(): number {
    return this.made;
  }

  /** What is neither spent nor held. */
  get left(): number {
    return this.cap - this.made - this.held;
  }

  /** Would a step of at most `n` subrequests fit now (beside what is held)? */
  fits(n: number): boolean {
    return this.made + this.held + n <= this.cap;
  }

  /** Holds `n` for a step about to start; false (nothing held) when it does not fit. */
  hold(n: number): boolean {
    if (!this.fits(n)) return false;
    this.held += n;
    return true;
  }

  unhold(n: number): void {
    this.held = Math.max(0, this.held - n);
  }

  /** Charges `n` subrequests about to be made; throws (nothing charged) past the cap. */
  charge(n = 1): void {
    if (this.made + n > this.cap) throw new SubrequestBudgetExceeded(this.cap, this.made, n);
    this.made += n;
  }

  /** Records subrequests made outside the meter (from the headroom); never refused. */
  force(n = 1): void {
    this.made += n;
  }
}

/** Members of an @upstash/redis client that are not commands (no request of their own). */
const REDIS_PASS = new Set<PropertyKey>(["use", "addTelemetry", "autoPipeline", "readYourWritesSyncToken", "then"]);

function meterPipeline<T extends object>(pipeline: T, budget: SubrequestBudget): T {
  return new Proxy(pipeline, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (prop !== "exec" || typeof value !== "function") return value;
      return (...args: unknown[]) => {
        budget.charge(1);
        return Reflect.apply(value, target, args);
      };
    },
  });
}

type ScriptHandle = { script: string };

/** The client's own script handle for `source` (scriptsFor keeps them per client), so a meter reuses it (no new SHA-1). */
function cachedHandle(redis: Deps["redis"], source: string): ScriptHandle | undefined {
  return (Object.values(scriptsFor(redis)) as ScriptHandle[]).find((h) => h.script === source);
}

/** A script handle whose every request (exec: one EVALSHA; eval, evalsha) is charged. */
function meterScript<T extends object>(handle: T, budget: SubrequestBudget): T {
  return new Proxy(handle, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown;
      if (typeof value !== "function" || !(prop === "exec" || prop === "eval" || prop === "evalsha")) return value;
      return (...args: unknown[]) => {
        budget.charge(1);
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

function meterRedis(redis: Deps["redis"], budget: SubrequestBudget): Deps["redis"] {
  const proxy: Deps["redis"] = new Proxy(redis, {
    get(target, prop) {
      const value = Reflect.get(target, prop, target) as unknown;
      if (typeof value !== "function" || REDIS_PASS.has(prop)) return value;
      const fn = value as (...a: unknown[]) => unknown;
      // One request at exec, whatever was queued.
      if (prop === "pipeline" || prop === "multi")
        return (...args: unknown[]) => meterPipeline(fn.apply(target, args) as object, budget);
      // The app's scripts: the client's cached handle, charged per exec (its rare NOSCRIPT → EVAL
      // retry comes out of the headroom). Any other script is built on the meter: its EVALSHA
      // (and EVAL after NOSCRIPT) go through it.
      if (prop === "createScript")
        return (source: string, opts?: { readonly?: boolean }) => {
          const handle = opts?.readonly ? undefined : cachedHandle(target, source);
          return handle ? meterScript(handle, budget) : fn.apply(proxy, [source, opts]);
        };
      return (...args: unknown[]) => {
        budget.charge(1);
        return fn.apply(target, args);
      };
    },
  });
  return proxy;
}

type Executor = Pick<Deps["db"], "execute">;

function meterExecute(exec: Executor["execute"], budget: SubrequestBudget): Executor["execute"] {
  return ((...args: Parameters<Executor["execute"]>) => {
    budget.charge(1);
    return exec(...args);
  }) as Executor["execute"];
}

function meterDb(db: Deps["db"], budget: SubrequestBudget): Deps["db"] {
  return {
    execute: meterExecute(db.execute.bind(db), budget),
    transaction: ((fn: (tx: Executor) => Promise<unknown>) => {
      // BEGIN and COMMIT (or ROLLBACK) are the SDK's own statements: charged up front, so a
      // transaction that starts can always end.
      budget.charge(2);
      return db.transaction((tx) => fn({ execute: meterExecute(tx.execute.bind(tx), budget) }));
    }) as Deps["db"]["transaction"],
  };
}

function meterMethods<T extends object>(
  port: T,
  methods: readonly PropertyKey[],
  budget: SubrequestBudget,
  cost = 1,
): T {
  return new Proxy(port, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown;
      if (typeof value !== "function" || !methods.includes(prop)) return value;
      return (...args: unknown[]) => {
        budget.charge(cost);
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

/**
 * `deps` whose ports charge `budget` per request (see the file comment). Everything else — the
 * isolate's memory, caches, clock, log, waitUntil — is the same object. The local payment provider
 * calls our own webhook back from the same invocation: two subrequests per provider call.
 */
export function metered<D extends Deps>(deps: D, budget: SubrequestBudget): D {
  return {
    ...deps,
    redis: meterRedis(deps.redis, budget),
    seckillShards: deps.seckillShards.map((r) => meterRedis(r, budget)),
    db: meterDb(deps.db, budget),
    queue: meterMethods(deps.queue, ["publish", "publishJSON", "batchJSON"], budget),
    payments: meterMethods(
      deps.payments,
      ["charge", "refund"],
      budget,
      deps.config.PAYMENT_PROVIDER === "local" ? 2 : 1,
    ),
  };
}

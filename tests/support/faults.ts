/**
 * Fault injection around the ports (queue, db, redis): on command, a call fails, is dropped, is
 * delayed or is duplicated. The engines stay real; only the calls to them are disturbed, the way a
 * network, a crash or an at-least-once broker would disturb them.
 *
 *   const faults = new Faults();
 *   const t = await serveTestApp(env, { wrap: (deps) => faults.wrap(deps) });
 *   faults.on("queue.batchJSON", "fail", { times: 1 });
 *   faults.on("db.transaction", "fail", { when: (args) => … });
 */
import type { Deps } from "../../src/deps.ts";

/**
 * fail: reject without calling; drop: resolve without calling; delay: call later; duplicate: call
 * `copies` times; lose: call, then reject (the engine did the work, the caller never hears — a
 * crash or a cut connection after the fact); tap: record the arguments and drop the call.
 */
export type FaultAction = "fail" | "drop" | "delay" | "duplicate" | "lose" | "tap";

interface Rule {
  target: string;
  action: FaultAction;
  /** Remaining applications; Infinity = until cleared. */
  times: number;
  when?: (args: unknown[]) => boolean;
  delayMs: number;
  copies: number;
}

export class InjectedFault extends Error {
  constructor(target: string) {
    super(`injected fault: ${target}`);
    this.name = "InjectedFault";
  }
}

export class Faults {
  private rules: Rule[] = [];
  /** Calls seen per target (after wrapping), for assertions. */
  readonly calls = new Map<string, number>();
  /** Arguments of tapped calls, per target. */
  readonly tapped = new Map<string, unknown[][]>();

  on(
    target: string,
    action: FaultAction,
    opts: { times?: number; when?: (args: unknown[]) => boolean; delayMs?: number; copies?: number } = {},
  ): this {
    this.rules.push({
      target,
      action,
      times: opts.times ?? Number.POSITIVE_INFINITY,
      when: opts.when,
      delayMs: opts.delayMs ?? 0,
      copies: opts.copies ?? 2,
    });
    return this;
  }

  clear(): void {
    this.rules = [];
  }

  private take(target: string, args: unknown[]): Rule | undefined {
    const rule = this.rules.find((r) => r.target === target && r.times > 0 && (!r.when || r.when(args)));
    if (rule) rule.times--;
    return rule;
  }

  /** Wraps one object's methods as `${name}.${method}`. */
  wrapPort<T extends object>(name: string, port: T): T {
    const faults = this;
    return new Proxy(port, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== "function" || typeof prop !== "string") return value;
        const key = `${name}.${prop}`;
        return function (this: unknown, ...args: unknown[]) {
          faults.calls.set(key, (faults.calls.get(key) ?? 0) + 1);
          const rule = faults.take(key, args);
          // `this` stays the proxy, so objects a method creates (scripts, pipelines) call back through it.
          const call = () => Reflect.apply(value, this, args);
          if (!rule) return call();
          switch (rule.action) {
            case "fail":
              // Thrown synchronously: right for sync factories (multi, pipeline) and, inside an
              // async caller, the same as a rejection for async methods.
              throw new InjectedFault(key);
            case "lose":
              return Promise.resolve(call()).then(() => Promise.reject(new InjectedFault(`${key} (reply lost)`)));
            case "tap":
              faults.tapped.set(key, [...(faults.tapped.get(key) ?? []), args]);
              return Promise.resolve(undefined);
            case "drop":
              // The call "succeeded" from the caller's point of view but never reached the engine.
              return Promise.resolve(undefined);
            case "delay":
              return new Promise((r) => setTimeout(r, rule.delayMs)).then(call);
            case "duplicate":
              return (async () => {
                const results = await Promise.all(Array.from({ length: rule.copies }, () => call()));
                return results[0];
              })();
          }
        };
      },
    });
  }

  wrap(deps: Deps): Deps {
    return {
      ...deps,
      queue: this.wrapPort("queue", deps.queue),
      db: this.wrapPort("db", deps.db),
      redis: this.wrapPort("redis", deps.redis),
    };
  }
}

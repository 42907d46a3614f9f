/**
 * Redis commands counted at an app's own client, by kind: the reservation script ("reserve"),
 * the admission lease ("lease"), any other script by its luaSources name, else the method name.
 * A counting proxy around deps.redis with the real engine behind it:
 *
 *   const count = new CommandCount();
 *   const t = await serveTestApp(env, { wrap: (deps) => ({ ...deps, redis: count.wrap(deps.redis) }) });
 */
import { createHash } from "node:crypto";
import type { Redis } from "@upstash/redis";
import { luaSources } from "../../src/redis/scripts.ts";

const sha1 = (text: string) => createHash("sha1").update(text, "utf8").digest("hex");

/** Script → kind, by source (EVAL) and by SHA1 (EVALSHA). */
const SCRIPT_KINDS = new Map<string, string>();
for (const [name, src] of Object.entries(luaSources) as [string, string][]) {
  const kind = name === "reserveStock" ? "reserve" : name === "seckillAdmission" ? "lease" : name;
  SCRIPT_KINDS.set(src, kind);
  SCRIPT_KINDS.set(sha1(src), kind);
}

export class CommandCount {
  readonly byKind = new Map<string, number>();
  get(kind: string): number {
    return this.byKind.get(kind) ?? 0;
  }
  private add(kind: string): void {
    this.byKind.set(kind, this.get(kind) + 1);
  }
  private kindOf(method: string, args: unknown[]): string {
    if (method === "evalsha" || method === "eval") return SCRIPT_KINDS.get(String(args[0])) ?? method;
    return method;
  }
  /** The client, counting every command it sends, pipelined ones included. */
  wrap(redis: Redis): Redis {
    const count = this;
    const wrapped: Redis = new Proxy(redis, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== "function" || typeof prop !== "string") return value;
        return function (this: unknown, ...args: unknown[]) {
          if (prop === "pipeline" || prop === "multi") {
            const p = Reflect.apply(value, this, args) as object;
            return new Proxy(p, {
              get(pt, pp, pr) {
                const pv = Reflect.get(pt, pp, pr);
                if (typeof pv !== "function" || typeof pp !== "string") return pv;
                return function (this: unknown, ...pargs: unknown[]) {
                  if (pp !== "exec" && pp !== "length") count.add(count.kindOf(pp, pargs));
                  // Pipeline methods return the pipeline for chaining: keep returning the proxy.
                  const r = Reflect.apply(pv, pt, pargs);
                  return r === pt ? this : r;
                };
              },
            });
          }
          if (prop !== "createScript") count.add(count.kindOf(prop, args));
          // `this` stays the proxy, so script handles built on it send through it.
          return Reflect.apply(value, this, args);
        };
      },
    });
    return wrapped;
  }
}

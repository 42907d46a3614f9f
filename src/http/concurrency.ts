/**
 * A bound on requests of one kind in progress at once in this isolate, without a queue: a request
 * beyond it is refused at once with 503 + Retry-After (its sender retries), before its body is
 * read or any I/O is done. No queue, because on workerd a request must not be woken by another
 * request's promise (src/runtime.ts), and because a parked request would still hold its
 * connection while the dependency it waits for is the thing that is short.
 */
import { createMiddleware } from "hono/factory";
import { AppError } from "../errors.ts";
import type { Deps } from "../deps.ts";
import type { AppEnv } from "../types.ts";

/** Seconds a refused sender is asked to wait: the admitted ones finish within a transaction's deadline. */
const RETRY_AFTER_SECONDS = 1;

export class ConcurrencyGate {
  /** Requests admitted and not yet answered (0 ≤ inFlight ≤ limit). */
  inFlight = 0;
  /** Requests refused because `limit` were in flight. */
  refused = 0;

  constructor(readonly limit: number) {}

  /** Takes a place when one is free; the caller must `leave()` exactly once after a `true`. */
  tryEnter(): boolean {
    if (this.inFlight >= this.limit) {
      this.refused++;
      return false;
    }
    this.inFlight++;
    return true;
  }

  leave(): void {
    this.inFlight--;
  }
}

/** Admits the request through the isolate's gate `pick(deps)`, or answers 503 UNAVAILABLE + Retry-After. */
export function bounded(what: string, pick: (deps: Deps) => ConcurrencyGate) {
  return createMiddleware<AppEnv>(async (c, next) => {
    const gate = pick(c.get("deps"));
    if (!gate.tryEnter()) {
      throw new AppError("UNAVAILABLE", `too many ${what} in progress; try again shortly`, {
        retryAfterSeconds: RETRY_AFTER_SECONDS,
      });
    }
    try {
      await next();
    } finally {
      gate.leave();
    }
  });
}

/**
 * A counting semaphore without a queue: at most `max` holders at once, and one more is refused
 * at once (the caller answers 503 + Retry-After) rather than waiting — a wait would hold its
 * request, body and socket anyway. Per isolate (plain memory: no I/O, so any runtime's requests
 * may share it). A holder releases its slot when done; a slot held longer than `maxHoldMs` counts
 * as abandoned and is taken back (on workerd a cancelled request's `finally` may never run), so a
 * leak costs capacity for at most that long and churn cannot exhaust the slots.
 */
import { createMiddleware } from "hono/factory";
import type { Deps } from "../deps.ts";
import { AppError } from "../errors.ts";
import type { AppEnv } from "../types.ts";

export class Slots {
  /** Holders now → when each took its slot (ms); at most `max` entries. */
  private readonly holders = new Map<number, number>();
  private next = 0;
  /** Takers refused because all slots were held, and slots taken back as abandoned, since the isolate started. */
  refused = 0;
  abandoned = 0;

  constructor(
    readonly max: number,
    private readonly maxHoldMs: number,
  ) {}

  get inFlight(): number {
    return this.holders.size;
  }

  /** A slot's ticket for `release`, or undefined when all `max` are held. */
  tryTake(now: number): number | undefined {
    if (this.holders.size >= this.max) {
      for (const [ticket, at] of this.holders)
        if (now - at > this.maxHoldMs) {
          this.holders.delete(ticket);
          this.abandoned++;
        }
      if (this.holders.size >= this.max) {
        this.refused++;
        return undefined;
      }
    }
    const ticket = this.next++;
    this.holders.set(ticket, now);
    return ticket;
  }

  /** Gives a slot back (a ticket already taken back as abandoned is a no-op). */
  release(ticket: number): void {
    this.holders.delete(ticket);
  }
}

/**
 * Route middleware: admits the request through the isolate's slots `pick(deps)` for as long as it
 * runs, or answers 503 UNAVAILABLE + Retry-After 1 (the sender retries) before its body is read.
 */
export function bounded(what: string, pick: (deps: Deps) => Slots) {
  return createMiddleware<AppEnv>(async (c, next) => {
    const deps = c.get("deps");
    const slots = pick(deps);
    const ticket = slots.tryTake(deps.clock.now());
    if (ticket === undefined)
      throw new AppError("UNAVAILABLE", `too many ${what} in progress; try again shortly`, { retryAfterSeconds: 1 });
    try {
      await next();
    } finally {
      slots.release(ticket);
    }
  });
}

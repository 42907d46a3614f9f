/**
 * Per-address counts in fixed windows, in the isolate's memory only (an LRU of 20,000 addresses):
 * `refusedFor` answers before any I/O, so a refused caller costs nothing but the lookup. Per
 * isolate on purpose: a global count would itself cost a Redis command per request; a caller
 * spread over many isolates is bounded per isolate.
 *
 * Two of them (src/isolate.ts):
 * - the miss meter: lookups that found nothing (unknown shop or voucher ids), at
 *   most MISS_PER_ADDRESS per MISS_WINDOW_MS; past it every lookup the isolate's memory cannot
 *   answer is refused with 429 + Retry-After. Only not-found results count — a crowd arriving at a
 *   cold isolate for a real sale or shop is never refused — and L1 hits are never checked.
 * - the public body gate: requests with a body to routes anyone may call without
 *   credentials (sign-in, send-code), at most PUBLIC_BODIES_PER_ADDRESS per
 *   PUBLIC_BODIES_WINDOW_MS, counted and refused before the body is read or parsed
 *   (`publicBodyGate`). The console's sign-in has its own per-address gate (operator-attempts.ts).
 */
import { LRUCache } from "lru-cache";
import { createMiddleware } from "hono/factory";
import { AppError } from "../errors.ts";
import type { AppEnv } from "../types.ts";
import { limitAddress } from "./client-ip.ts";

export class AddressWindow {
  private readonly counts = new LRUCache<string, { window: number; n: number }>({ max: 20_000 });

  /** `limit` per `windowMs` per address (0: off). */
  constructor(
    private readonly limit: number,
    private readonly windowMs: number,
  ) {}

  /** ms `address` is refused for (0: it may go on). Memory only. */
  refusedFor(address: string, now: number): number {
    if (this.limit === 0) return 0;
    const window = Math.floor(now / this.windowMs);
    const e = this.counts.get(address);
    return e && e.window === window && e.n >= this.limit ? (window + 1) * this.windowMs - now : 0;
  }

  /** Counts one event of `address`. */
  count(address: string, now: number): void {
    if (this.limit === 0) return;
    const window = Math.floor(now / this.windowMs);
    const e = this.counts.get(address);
    if (e && e.window === window) e.n++;
    else this.counts.set(address, { window, n: 1 });
  }
}

/**
 * Before a public route's body middleware: counts the request against its address and refuses it
 * (429 + Retry-After) once the address spent PUBLIC_BODIES_PER_ADDRESS in the window — before any
 * byte of the body is read.
 */
export const publicBodyGate = createMiddleware<AppEnv>(async (c, next) => {
  const deps = c.get("deps");
  const address = limitAddress(c, deps.config);
  const now = deps.clock.now();
  const gate = deps.isolate.publicBodies;
  const wait = gate.refusedFor(address, now);
  if (wait > 0)
    throw new AppError("RATE_LIMITED", "too many requests from this address", { retryAfterSeconds: wait / 1000 });
  gate.count(address, now);
  await next();
});

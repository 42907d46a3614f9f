/**
 * Lookups of things that do not exist, metered per client address (issue 16 item 5): a client
 * probing random shop or voucher ids made every request an L2 read, a rebuild lock and a MySQL
 * query (~4,500 Redis commands/s from one client). Each address may cause at most MISS_PER_ADDRESS
 * lookups that found nothing per MISS_WINDOW_MS in an isolate; past it, every lookup the isolate's
 * memory cannot answer is refused with 429 + Retry-After *before any I/O*. Only not-found results
 * count — a crowd arriving at a cold isolate for a real sale or shop is never refused — and L1 hits
 * are never checked.
 *
 * Per isolate, on purpose: a global count would itself cost a Redis command per miss. A prober
 * spread over many isolates is bounded per isolate; the listing limit covers the listing routes
 * globally. Memory: an LRU of 20,000 addresses.
 */
import { LRUCache } from "lru-cache";
import type { Config } from "../env.ts";

export class MissMeter {
  private readonly counts = new LRUCache<string, { window: number; n: number }>({ max: 20_000 });

  constructor(private readonly config: Pick<Config, "MISS_PER_ADDRESS" | "MISS_WINDOW_MS">) {}

  /** ms `address` is refused for (0: it may look up). Memory only. */
  refusedFor(address: string, now: number): number {
    const { MISS_PER_ADDRESS: limit, MISS_WINDOW_MS: windowMs } = this.config;
    if (limit === 0) return 0;
    const window = Math.floor(now / windowMs);
    const e = this.counts.get(address);
    return e && e.window === window && e.n >= limit ? (window + 1) * windowMs - now : 0;
  }

  /** Counts one lookup of `address` that found nothing. */
  count(address: string, now: number): void {
    if (this.config.MISS_PER_ADDRESS === 0) return;
    const window = Math.floor(now / this.config.MISS_WINDOW_MS);
    const e = this.counts.get(address);
    if (e && e.window === window) e.n++;
    else this.counts.set(address, { window, n: 1 });
  }
}

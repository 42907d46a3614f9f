/**
 * Failed operator sign-ins per client address: a wrong ADMIN_TOKEN on `/admin/*`,
 * on operator routes or on `POST /console/login` counts against the caller's address
 * (@upstash/ratelimit sliding window, OPERATOR_AUTH_FAILURES per OPERATOR_AUTH_WINDOW_SECONDS,
 * across isolates); past it the address is refused with 429 + Retry-After — right token or not —
 * until the window lets it in again. Only failures cost a Redis command; the block is remembered
 * in the isolate (LRU of 10,000 addresses), so a blocked guesser costs nothing more.
 * An operator sharing an address with a guesser is locked out with them: the price of a limit
 * that a token guesser cannot rotate around (IPv6 counts per LIMIT_IPV6_PREFIX).
 */
import { Ratelimit } from "@upstash/ratelimit";
import { LRUCache } from "lru-cache";
import type { RedisPort } from "../deps.ts";
import type { Config } from "../env.ts";
import { RATELIMIT_FAIL_CLOSED } from "../resilience.ts";

export class OperatorAttempts {
  private readonly limiter: Ratelimit | null;
  /** address → epoch ms until which it is refused. */
  private readonly blocked = new LRUCache<string, number>({ max: 10_000 });

  constructor(config: Pick<Config, "OPERATOR_AUTH_FAILURES" | "OPERATOR_AUTH_WINDOW_SECONDS">, redis: RedisPort) {
    this.limiter =
      config.OPERATOR_AUTH_FAILURES === 0
        ? null
        : new Ratelimit({
            redis,
            analytics: false,
            timeout: RATELIMIT_FAIL_CLOSED,
            limiter: Ratelimit.slidingWindow(config.OPERATOR_AUTH_FAILURES, `${config.OPERATOR_AUTH_WINDOW_SECONDS} s`),
            prefix: "rl:op:fail",
          });
  }

  /** ms this address is still refused for (0: it may try). Memory only. */
  refusedFor(address: string, now: number): number {
    const until = this.blocked.get(address);
    if (until === undefined) return 0;
    if (until <= now) {
      this.blocked.delete(address);
      return 0;
    }
    return until - now;
  }

  /** Counts a failed attempt; returns how long the address is now refused (0 while under the limit). */
  async failed(address: string, now: number): Promise<number> {
    if (!this.limiter) return 0;
    // In braces: the sliding window's two keys (this window, the last) share a slot on a cluster.
    const res = await this.limiter.limit(`{${address}}`);
    if (res.success) return 0;
    const until = Math.max(res.reset, now + 1000);
    this.blocked.set(address, until);
    return until - now;
  }
}

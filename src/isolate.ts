/**
 * Everything one isolate (one Worker isolate, one Bun or Deno process) remembers between requests,
 * in one place: built once per isolate by createDeps and reachable as `deps.isolate`. Nothing an
 * isolate remembers hides in module-level maps; a reader sees here what can be stale, for how
 * long, and how big it may grow (each field documents its bound).
 */
import { LRUCache } from "lru-cache";
import type { Config } from "./env.ts";
import { SessionCache } from "./services/session-cache.ts";
import { UvBatcher } from "./services/uv.ts";

export interface Isolate {
  /**
   * Seckill sold-out memo: voucherId → epoch ms until which this isolate answers SOLD_OUT without
   * Redis (SOLD_OUT_MEMO_MS after Redis said so — long enough to absorb a stampede, short enough
   * that stock released by a cancelled order is sold again). At most 10,000 vouchers.
   */
  soldOut: LRUCache<number, number>;
  /**
   * Seckill holders seen by this isolate: "voucherId:userId" → the order id Redis gave that buyer.
   * A buyer who tries again (a lost reply, an impatient thumb) is told the order they hold with no
   * Redis call. Kept for HOLDER_MEMO_MS at most (and never beyond half the payment timeout: a
   * closed order gives its buyer the right to buy again); at most 100,000 entries.
   */
  holders: LRUCache<string, { orderId: string; untilMs: number }>;
  /**
   * Sessions (services/session-cache.ts): verified tokens → user, at most SESSION_CACHE_MAX (LRU),
   * plus the signing keys imported once. Answered from memory only while the last sync with Redis
   * began less than SESSION_TRUST_MS ago (revocations and first-seen tokens are confirmed within
   * that bound); one background command per SESSION_SYNC_MS renews and confirms them all.
   */
  sessions: SessionCache;
  /**
   * UV counting (services/uv.ts UvBatcher): visitors already counted today (LRU, 50,000) and those
   * waiting for the next flush (≤ 20,000), sent as one PFADD per day key every 2 s at most.
   */
  uv: UvBatcher;
}

/** Upper bound of a holder memo entry, ms. */
export const HOLDER_MEMO_MS = 60_000;

/** How long a holder memo entry is trusted, ms: never beyond half the payment timeout. */
export function holderMemoMs(config: Pick<Config, "ORDER_PAY_TIMEOUT_SECONDS">): number {
  return Math.min(HOLDER_MEMO_MS, (config.ORDER_PAY_TIMEOUT_SECONDS * 1000) / 2);
}

export function createIsolate(config: Config): Isolate {
  return {
    soldOut: new LRUCache<number, number>({ max: 10_000 }),
    // Expiry is checked against deps.clock by the reader (untilMs), so the bound holds in wall time.
    holders: new LRUCache<string, { orderId: string; untilMs: number }>({ max: 100_000 }),
    sessions: new SessionCache(config),
    uv: new UvBatcher(),
  };
}

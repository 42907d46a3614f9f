/**
 * What one isolate remembers of the seckill between requests (held by `deps.isolate.seckill`),
 * with its bounds, so a request can be answered without Redis when Redis already told us:
 *
 * - holders: "voucherId:userId" → the order id Redis gave that buyer. A buyer who tries again (a
 *   lost reply, an impatient thumb) is told the order they hold with no Redis call. Trusted for
 *   HOLDER_MEMO_MS at most and never beyond half the payment timeout (a closed order gives its
 *   buyer the right to buy again; close.ts also forgets the holders it closes); ≤ 100,000 entries.
 * - sold out: voucherId → epoch ms until which SOLD_OUT is answered without Redis (SOLD_OUT_MEMO_MS
 *   after Redis said so: long enough to absorb a stampede, short enough that stock released by a
 *   cancelled order is sold again); ≤ 10,000 vouchers.
 */
import { LRUCache } from "lru-cache";
import type { Config } from "../../env.ts";

/** Upper bound of a holder memo entry, ms. */
export const HOLDER_MEMO_MS = 60_000;

export class SeckillMemory {
  private readonly holders = new LRUCache<string, { orderId: string; untilMs: number }>({ max: 100_000 });
  private readonly soldOutUntil = new LRUCache<number, number>({ max: 10_000 });
  /** How long a holder entry is trusted, ms. */
  readonly holderMemoMs: number;

  constructor(private readonly config: Pick<Config, "ORDER_PAY_TIMEOUT_SECONDS" | "SOLD_OUT_MEMO_MS">) {
    this.holderMemoMs = Math.min(HOLDER_MEMO_MS, (config.ORDER_PAY_TIMEOUT_SECONDS * 1000) / 2);
  }

  /** The order `userId` holds of `voucherId` as this isolate last heard, while trusted. */
  heldBy(voucherId: number, userId: number, now: number): string | undefined {
    const key = `${voucherId}:${userId}`;
    const held = this.holders.get(key);
    if (held === undefined) return undefined;
    if (held.untilMs > now) return held.orderId;
    this.holders.delete(key);
    return undefined;
  }

  rememberHolder(voucherId: number, userId: number, orderId: string, now: number): void {
    this.holders.set(`${voucherId}:${userId}`, { orderId, untilMs: now + this.holderMemoMs });
  }

  forgetHolder(voucherId: number, userId: number | string): void {
    this.holders.delete(`${voucherId}:${userId}`);
  }

  /** Tests: forget every holder. */
  forgetHolders(): void {
    this.holders.clear();
  }

  isSoldOut(voucherId: number, now: number): boolean {
    const until = this.soldOutUntil.get(voucherId);
    if (until === undefined) return false;
    if (until > now) return true;
    this.soldOutUntil.delete(voucherId);
    return false;
  }

  /** Redis said SOLD_OUT at `now` (no-op with SOLD_OUT_MEMO_MS 0). */
  markSoldOut(voucherId: number, now: number): void {
    if (this.config.SOLD_OUT_MEMO_MS > 0) this.soldOutUntil.set(voucherId, now + this.config.SOLD_OUT_MEMO_MS);
  }
}

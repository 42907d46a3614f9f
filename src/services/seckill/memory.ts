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
 *   cancelled order is sold again), with the voucher's buyers as Redis listed them (≤ MAX_MEMO_BUYERS
 *   user ids): SOLD_OUT is answered from memory only to a caller not among them — a buyer who holds
 *   a unit but lost the reply (a killed isolate, a dropped connection) asks Redis and is told
 *   DUPLICATE_ORDER, never SOLD_OUT. Until the list has arrived, nobody is answered from memory;
 *   ≤ 1,000 vouchers.
 */
import { LRUCache } from "lru-cache";
import type { Config } from "../../env.ts";

/** Upper bound of a holder memo entry, ms. */
export const HOLDER_MEMO_MS = 60_000;
/** Buyers one sold-out entry may list; a voucher with more is not answered from memory. */
export const MAX_MEMO_BUYERS = 100_000;

interface SoldOut {
  untilMs: number;
  /** The buyers Redis listed once it said SOLD_OUT; undefined while the list is on its way. */
  buyers: Set<number> | undefined;
}

export class SeckillMemory {
  private readonly holders = new LRUCache<string, { orderId: string; untilMs: number }>({ max: 100_000 });
  private readonly soldOut = new LRUCache<number, SoldOut>({ max: 1_000 });
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

  /** Whether SOLD_OUT may be answered to `userId` without Redis: sold out, listed, and not a buyer. */
  isSoldOutFor(voucherId: number, userId: number, now: number): boolean {
    const entry = this.soldOut.get(voucherId);
    if (entry === undefined) return false;
    if (entry.untilMs <= now) {
      this.soldOut.delete(voucherId);
      return false;
    }
    return entry.buyers !== undefined && !entry.buyers.has(userId);
  }

  /**
   * Redis said SOLD_OUT at `now`. True when the caller should fetch the voucher's buyers and hand
   * them to `soldOutBuyers` (or report `soldOutListFailed`); false with SOLD_OUT_MEMO_MS 0 or while
   * an entry is fresh (its list loaded or on its way).
   */
  markSoldOut(voucherId: number, now: number): boolean {
    if (this.config.SOLD_OUT_MEMO_MS <= 0) return false;
    const entry = this.soldOut.get(voucherId);
    if (entry && entry.untilMs > now) return false;
    this.soldOut.set(voucherId, { untilMs: now + this.config.SOLD_OUT_MEMO_MS, buyers: undefined });
    return true;
  }

  /** The buyers could not be listed: forget the entry, so a later SOLD_OUT tries again. */
  soldOutListFailed(voucherId: number): void {
    if (this.soldOut.get(voucherId)?.buyers === undefined) this.soldOut.delete(voucherId);
  }

  /** The buyers Redis listed after it said SOLD_OUT; a list over MAX_MEMO_BUYERS drops the entry. */
  soldOutBuyers(voucherId: number, userIds: readonly (number | string)[]): void {
    const entry = this.soldOut.get(voucherId);
    if (!entry) return;
    if (userIds.length > MAX_MEMO_BUYERS) {
      this.soldOut.delete(voucherId);
      return;
    }
    entry.buyers = new Set(userIds.map(Number));
  }
}

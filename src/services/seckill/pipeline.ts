/**
 * The reserving isolate's half of the batched order pipeline (architecture.md §5).
 *
 * Decision (measured, see README "Order pipeline"): reservations are NOT carried in messages.
 * The reservation script already wrote each one to the shop's Redis outbox, atomically with the
 * stock; the isolate only tells the writer "drain this shop", at most once per shop per one-second
 * window, and the writer pulls groups from the outbox. Compared with isolates micro-batching
 * reservations into message bodies, this keeps group sizes independent of how many isolates a
 * sale is spread over (on Workers, many), bounds QStash messages by time rather than by orders,
 * and leaves nothing to lose with an isolate: the outbox entry exists before the buyer has an
 * answer, and a lost drain message is replaced by the next window's or by the sweep.
 *
 * What this isolate remembers (`deps.orderGroups`, built once per isolate):
 * - the last drain window published per shop (so a crowd costs one publish per shop per second);
 * - the order-id → shop index entries not yet written (flushed every INDEX_FLUSH_MS as one HSET
 *   per hour key, so that GET /api/voucher-order/{id} finds a queued order in two commands);
 * - counters for operators.
 */
import type { Deps } from "../../deps.ts";
import { type Runtime, runtimes } from "../../runtime.ts";
import { keys } from "../../redis/keys.ts";
import { DRAIN_WINDOW_MS, drainMessage } from "../../queue/orders.ts";
import type { LockConflictStats } from "./mysql-retry.ts";
import { indexHourOf } from "./outbox.ts";
import type { Reservation } from "./types.ts";

/** How long reservations gather before one index write and drain publish, ms. */
export const INDEX_FLUSH_MS = 10;
/** Index keys outlive their hour by this much, seconds (a reservation rarely stays queued > minutes). */
export const INDEX_TTL_SECONDS = 2 * 86_400;

export interface OrderGroupStats {
  reservations: number;
  flushes: number;
  /** Redis commands sent by flushes (index HSET / EXPIRE). */
  redisCommands: number;
  drainPublishes: number;
  publishFailures: number;
  /** Writer side (this isolate serving /internal/orders/*): close messages published, orders created. */
  closePublishes: number;
  drained: number;
}

export class OrderGroups {
  /** shopId → last drain window published from this isolate. */
  readonly drainedWindow = new Map<number, number>();
  /** Index entries waiting for the next flush: hour → (orderId → shopId). */
  private pendingIndex = new Map<number, Map<string, number>>();
  /** Shops with reservations since the last flush → the windows to announce (one or two, ascending by insertion). */
  private pendingDrains = new Map<number, number[]>();
  /** Index keys whose TTL this isolate has set already. */
  private readonly expirySet = new Set<number>();
  private flush: Promise<void> | undefined;
  readonly stats: OrderGroupStats = { reservations: 0, flushes: 0, redisCommands: 0, drainPublishes: 0, publishFailures: 0, closePublishes: 0, drained: 0 };
  /** MySQL lock conflicts met by this isolate's writer/closer (all retried; see mysql-retry.ts). */
  readonly lockConflicts: LockConflictStats = { retried: 0, exhausted: 0 };

  /** `runtime.sharesIo` false (workerd): only the request that starts a flush waits for it. */
  constructor(private readonly runtime: Runtime = runtimes.bun) {}

  /** Shop of a reservation made by this isolate whose index entry is not written yet. */
  pendingShopOf(orderId: string): number | undefined {
    return this.pendingIndex.get(indexHourOf(orderId))?.get(orderId);
  }

  /**
   * Records a reservation the script just made; resolves when its index entry is written and its
   * shop's drain is published (or known to be published). Callers pass the promise to waitUntil.
   * Never rejects: a failure is logged and repaired by the sweep.
   *
   * On workerd the flush belongs to the request that started it (its timer, its fetches, its
   * waitUntil); later callers of the same window join the batch in memory and get a settled
   * promise, so no request's waitUntil waits on another request's I/O. If the owner's isolate
   * dies before the flush, its batch is lost like an isolate's would be: the outbox entries are
   * there, and the next window's drain or the sweep finds them.
   */
  add(deps: Deps, r: Reservation): Promise<void> {
    this.stats.reservations++;
    const hour = indexHourOf(r.orderId);
    let entries = this.pendingIndex.get(hour);
    if (!entries) this.pendingIndex.set(hour, (entries = new Map()));
    entries.set(r.orderId, r.shopId);
    // The window of when the entry *landed* (now: the script has returned), not of `reservedAt`,
    // which was read before the config load, the admission lease and the id draw: a reservation
    // whose awaits crossed a window boundary was announced for a window already drained.
    const landed = Math.max(r.reservedAt, deps.clock.now());
    const window = Math.floor(landed / DRAIN_WINDOW_MS);
    // In the window's last ORDER_WINDOW_GRACE_MS, the next window too (see env.ts): its drain is
    // delivered a whole window after this entry exists, whatever happened to this window's id.
    const late = Math.floor((landed + deps.config.ORDER_WINDOW_GRACE_MS) / DRAIN_WINDOW_MS);
    for (const w of late > window ? [window, late] : [window]) {
      if ((this.drainedWindow.get(r.shopId) ?? -1) >= w) continue;
      const pending = this.pendingDrains.get(r.shopId);
      if (!pending) this.pendingDrains.set(r.shopId, [w]);
      else if (!pending.includes(w)) pending.push(w);
    }
    if (this.flush) return this.runtime.sharesIo ? this.flush : Promise.resolve();
    this.flush = new Promise<void>((resolve) => setTimeout(resolve, INDEX_FLUSH_MS)).then(() => this.runFlush(deps));
    return this.flush;
  }

  private async runFlush(deps: Deps): Promise<void> {
    this.flush = undefined;
    const index = this.pendingIndex;
    const drains = this.pendingDrains;
    this.pendingIndex = new Map();
    this.pendingDrains = new Map();
    this.stats.flushes++;
    const work: Promise<unknown>[] = [];
    if (index.size > 0) {
      const p = deps.redis.pipeline();
      for (const [hour, entries] of index) {
        p.hset(keys.seckill.orderIndex(hour), Object.fromEntries(entries));
        this.stats.redisCommands++;
        if (!this.expirySet.has(hour)) {
          p.expire(keys.seckill.orderIndex(hour), 3600 + INDEX_TTL_SECONDS);
          this.stats.redisCommands++;
        }
      }
      work.push(
        p.exec().then(
          () => {
            for (const hour of index.keys()) this.expirySet.add(hour);
          },
          (err: unknown) => deps.log.warn("order index write failed; lookups of these orders wait for MySQL", { err }),
        ),
      );
    }
    const messages: [number, number][] = [];
    for (const [shop, windows] of drains) {
      // Ascending, and only windows not announced yet (another flush may have run meanwhile).
      for (const w of windows.sort((a, b) => a - b)) if ((this.drainedWindow.get(shop) ?? -1) < w) messages.push([shop, w]);
    }
    if (messages.length > 0) {
      for (const [shop, w] of messages) this.drainedWindow.set(shop, Math.max(w, this.drainedWindow.get(shop) ?? -1));
      this.stats.drainPublishes += messages.length;
      work.push(
        deps.queue.batchJSON(messages.map(([shop, w]) => drainMessage(deps, shop, w))).catch((err: unknown) => {
          this.stats.publishFailures++;
          // Forget the windows so the next reservation tries again; the sweep covers the rest.
          for (const [shop, w] of messages) if (this.drainedWindow.get(shop) === w) this.drainedWindow.delete(shop);
          deps.log.warn("drain publish failed; the next window or the outbox sweep will drain", { err });
        }),
      );
    }
    await Promise.all(work);
  }
}

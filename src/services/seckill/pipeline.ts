/**
 * The reserving isolate's half of the batched order pipeline (docs/architecture.md §5).
 * Reservations are NOT carried in messages: the reservation script already wrote each one to the
 * shop's Redis outbox; the isolate only announces "drain this shop", at most once per shop (and
 * shard) per one-second window, and the writer pulls groups from the outbox. Group sizes stay
 * independent of how many isolates a sale is spread over, QStash messages are bounded by time, and
 * nothing is lost with an isolate (decision and numbers: docs/architecture.md "Order pipeline").
 * This isolate remembers (`deps.isolate.orderGroups`) the last window announced per outbox, the
 * order-id → shop index entries not yet written (flushed every INDEX_FLUSH_MS), and counters.
 * The sweep (sweepOutbox, a cron job) is the repair path: it re-announces every outbox holding
 * overdue entries. Sharded vouchers: docs/modules.md "services/seckill/pipeline.ts".
 */
import type { Deps } from "../../deps.ts";
import { type Runtime, runtimes } from "../../runtime.ts";
import { keys } from "../../redis/keys.ts";
import { DRAIN_WINDOW_MS, drainMessage, drainNowMessage, type QueueMessage } from "../../queue/messages.ts";
import { metered, SubrequestBudget } from "../../ports/subrequests.ts";
import type { LockConflictStats } from "./mysql-retry.ts";
import {
  indexHourOf,
  indexValueOf,
  type OutboxRef,
  outboxesOf,
  outboxRedis,
  parseIndexValue,
  reachableOutboxes,
} from "./outbox.ts";
import { registeredSeckills } from "./registry.ts";
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
  /** Writer side (this isolate serving the order routes of queue/messages.ts): close messages published, orders created. */
  closePublishes: number;
  drained: number;
}

/** Key of an outbox in this isolate's maps: the shop id (unsharded, as before shards), or "shop:shard". */
type DrainKey = number | string;
const drainKeyOf = (r: OutboxRef): DrainKey => (r.shard === undefined ? r.shopId : `${r.shopId}:${r.shard}`);

export class OrderGroups {
  /** Outbox (drainKeyOf: shopId, or "shopId:shard") → last drain window published from this isolate. */
  readonly drainedWindow = new Map<DrainKey, number>();
  /** Index entries waiting for the next flush: hour → (orderId → index value: shopId, or "shopId:shard"). */
  private pendingIndex = new Map<number, Map<string, number | string>>();
  /** Outboxes with reservations since the last flush → the outbox and the windows to announce (one or two, ascending by insertion). */
  private pendingDrains = new Map<DrainKey, { outbox: OutboxRef; windows: number[] }>();
  /** Index keys whose TTL this isolate has set already. */
  private readonly expirySet = new Set<number>();
  private flush: Promise<void> | undefined;
  readonly stats: OrderGroupStats = {
    reservations: 0,
    flushes: 0,
    redisCommands: 0,
    drainPublishes: 0,
    publishFailures: 0,
    closePublishes: 0,
    drained: 0,
  };
  /** MySQL lock conflicts met by this isolate's writer/closer (all retried; see mysql-retry.ts). */
  readonly lockConflicts: LockConflictStats = { retried: 0, exhausted: 0 };

  /** `runtime.sharesIo` false (workerd): only the request that starts a flush waits for it. */
  constructor(private readonly runtime: Runtime = runtimes.bun) {}

  /** Outbox (shop, and shard when sharded) of a reservation made by this isolate whose index entry is not written yet. */
  pendingShopOf(orderId: string): OutboxRef | undefined {
    return parseIndexValue(this.pendingIndex.get(indexHourOf(orderId))?.get(orderId)) ?? undefined;
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
    entries.set(r.orderId, indexValueOf(r));
    // The window of when the entry *landed* (now: the script has returned), not of `reservedAt`,
    // which was read before the config load, the admission lease and the id draw: a reservation
    // whose awaits crossed a window boundary was announced for a window already drained.
    const landed = Math.max(r.reservedAt, deps.clock.now());
    const window = Math.floor(landed / DRAIN_WINDOW_MS);
    // In the window's last ORDER_WINDOW_GRACE_MS, the next window too (see env.ts): its drain is
    // delivered a whole window after this entry exists, whatever happened to this window's id.
    const late = Math.floor((landed + deps.config.ORDER_WINDOW_GRACE_MS) / DRAIN_WINDOW_MS);
    // Per outbox: the shop's in the main database, or in the buyer's home shard.
    const outbox: OutboxRef = r.shard === undefined ? { shopId: r.shopId } : { shopId: r.shopId, shard: r.shard };
    const key = drainKeyOf(outbox);
    for (const w of late > window ? [window, late] : [window]) {
      if ((this.drainedWindow.get(key) ?? -1) >= w) continue;
      const pending = this.pendingDrains.get(key);
      if (!pending) this.pendingDrains.set(key, { outbox, windows: [w] });
      else if (!pending.windows.includes(w)) pending.windows.push(w);
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
    const messages: { key: DrainKey; outbox: OutboxRef; w: number }[] = [];
    for (const [key, { outbox, windows }] of drains) {
      // Ascending, and only windows not announced yet (another flush may have run meanwhile).
      for (const w of windows.sort((a, b) => a - b))
        if ((this.drainedWindow.get(key) ?? -1) < w) messages.push({ key, outbox, w });
    }
    if (messages.length > 0) {
      for (const { key, w } of messages) this.drainedWindow.set(key, Math.max(w, this.drainedWindow.get(key) ?? -1));
      this.stats.drainPublishes += messages.length;
      work.push(
        deps.queue
          .batchJSON(messages.map(({ outbox, w }) => drainMessage(deps, outbox.shopId, w, outbox.shard)))
          .catch((err: unknown) => {
            this.stats.publishFailures++;
            // Forget the windows so the next reservation tries again; the sweep covers the rest.
            for (const { key, w } of messages) if (this.drainedWindow.get(key) === w) this.drainedWindow.delete(key);
            deps.log.warn("drain publish failed; the next window or the outbox sweep will drain", { err });
          }),
      );
    }
    await Promise.all(work);
  }
}

// ---------------------------------------------------------------------------------------------
// The outbox sweep (cron, every minute, under its lock — jobs/index.ts)

/** Outboxes per sweep pass step (one pipeline per database among them: a ZCOUNT each) and drain messages per publish batch. */
const SWEEP_SHOPS_PER_PIPELINE = 500;
const SWEEP_MESSAGES_PER_BATCH = 100;

export interface SweepResult {
  /** Overdue outbox entries seen, over all outboxes. */
  overdue: number;
  /** Drain messages published (one per outbox — shop, and shard — with overdue entries). */
  drains: number;
  /** True when the subrequest budget ended the pass before every outbox was looked at. */
  continued?: boolean;
}

/**
 * For each outbox holding entries overdue by OUTBOX_REPUBLISH_AFTER_SECONDS (drain message lost,
 * writer down, a claimed group whose writer died), publishes ONE drain message, deduplicated per
 * outbox and minute. The writer then claims the overdue entries in groups. The cost is one
 * pipelined ZCOUNT per outbox and at most one QStash message per outbox per minute (batched),
 * however large the backlog and however slow QStash is: a sweep never multiplies what it
 * re-sends. Runs on metered ports within its share of the cron invocation's subrequests
 * (src/ports/subrequests.ts) and stops at it, leaving the rest for the next run.
 *
 * Outboxes (outbox.ts outboxesOf): a shop's in the main database when it has unsharded vouchers
 * (every shop, before shards), and its outbox in each seckill shard its sharded vouchers use; a
 * drain found there carries the shard.
 *
 * Subrequests: the registry read, per SWEEP_SHOPS_PER_PIPELINE outboxes one pipeline per database
 * among them, one publish per SWEEP_MESSAGES_PER_BATCH drains — a handful whatever the number of
 * shops or the backlog.
 */
export async function sweepOutbox(
  deps: Deps,
  now: number,
  budget: SubrequestBudget = SubrequestBudget.forInvocation(deps),
): Promise<SweepResult> {
  const d = metered(deps, budget);
  // Never ahead of the clock the writer claims by: a drain for entries still under a claim lease
  // would find nothing, and its deduplication id would hold back the next sweep's for a minute.
  const cutoff = Math.min(now - deps.config.OUTBOX_REPUBLISH_AFTER_SECONDS * 1000, deps.clock.now());
  const outboxes = reachableOutboxes(deps, outboxesOf(await registeredSeckills(d, now)));
  let overdue = 0;
  const messages: QueueMessage[] = [];
  let continued = false;
  for (let i = 0; i < outboxes.length && !continued; i += SWEEP_SHOPS_PER_PIPELINE) {
    // One pipeline per database among this step's outboxes (main first, then shards ascending).
    const byDb = new Map<number | undefined, OutboxRef[]>();
    for (const o of outboxes.slice(i, i + SWEEP_SHOPS_PER_PIPELINE)) {
      let list = byDb.get(o.shard);
      if (!list) byDb.set(o.shard, (list = []));
      list.push(o);
    }
    for (const [shard, list] of byDb) {
      // This pipeline and the publishes of what it may find must fit.
      if (!budget.fits(1 + Math.ceil((messages.length + list.length) / SWEEP_MESSAGES_PER_BATCH))) {
        continued = true;
        break;
      }
      const p = outboxRedis(d, shard).pipeline();
      for (const o of list) p.zcount(keys.seckill.outboxDue(o.shopId), "-inf", cutoff);
      const counts = (await p.exec()) as number[];
      list.forEach((o, j) => {
        const n = Number(counts[j] ?? 0);
        if (n === 0) return;
        overdue += n;
        // No delay: these entries are due already. The id names the minute (and the shard), so
        // overlapping sweeps (two isolates, a retried cron) publish one drain between them.
        messages.push(drainNowMessage(deps, o.shopId, `sweep-${Math.floor(now / 60_000)}`, o.shard));
      });
    }
  }
  for (let i = 0; i < messages.length; i += SWEEP_MESSAGES_PER_BATCH)
    await d.queue.batchJSON(messages.slice(i, i + SWEEP_MESSAGES_PER_BATCH));
  return continued ? { overdue, drains: messages.length, continued } : { overdue, drains: messages.length };
}

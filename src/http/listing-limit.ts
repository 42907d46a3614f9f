/**
 * Per-address sliding window on the anonymous listing and search routes (crawlers): the shop
 * listings, the hot notes, a shop's vouchers and the shop types share one budget per client
 * address, LISTING_IP_LIMIT requests per LISTING_IP_WINDOW_MS (IPv6 per LIMIT_IPV6_PREFIX).
 * GET /api/shop/:id is a lookup, not a listing, and stays at zero Redis commands.
 * Each isolate counts per address in epoch-aligned windows and refuses from memory (429 +
 * Retry-After, no Redis); at most one background command per LISTING_SYNC_MS (lua/listing-sync.lua)
 * sends its counts and reads the global ones, so the limit holds across isolates one sync later.
 * Memory: an LRU of LISTING_IP_MAX addresses. Why not @upstash/ratelimit (one command per allowed
 * request): docs/modules.md "http/listing-limit.ts".
 */
import type { MiddlewareHandler } from "hono";
import { LRUCache } from "lru-cache";
import type { Config } from "../env.ts";
import type { Deps } from "../deps.ts";
import { AppError } from "../errors.ts";
import { keys } from "../redis/keys.ts";
import { scriptsFor } from "../redis/scripts.ts";
import type { AppEnv } from "../types.ts";
import { limitAddress } from "./client-ip.ts";

/** The routed paths the limit applies to (Hono patterns); the fast lane checks /api/shop-type/list itself. */
export const LISTING_PATHS = [
  "/api/shop/of/type",
  "/api/shop/of/name",
  "/api/blog/hot",
  "/api/voucher/list/:shopId",
  "/api/shop-type/list",
];

/** Re-exported: the address rule is shared by every per-address limit (http/client-ip.ts). */
export { limitKeyOf } from "./client-ip.ts";

/** Addresses one sync sends at most (the rest wait for the next one). */
const SYNC_BATCH = 1_000;

interface IpCount {
  /** Epoch window index (floor(ms / windowMs)) the counts below belong to. */
  window: number;
  /** Requests this isolate allowed in `window`. */
  mine: number;
  /** Of `mine`: not yet sent to Redis. */
  pending: number;
  /** Of `mine`: sent by the sync in flight. */
  inflight: number;
  /** Of `mine`: counted in Redis (confirmed by a sync). */
  sent: number;
  /** Other isolates' requests in `window`, as of the last sync. */
  others: number;
  /** All isolates' requests in the previous window, as best known. */
  prev: number;
}

/** What the operators' console shows of one isolate's listing limiter (ListingLimiter.snapshot). */
export interface ListingLimitSnapshot {
  limit: number;
  windowMs: number;
  /** Addresses (limit keys) remembered, of at most `max`. */
  tracked: number;
  max: number;
  /** Addresses whose sliding estimate is at the limit now: their next request is refused. */
  blocked: number;
  /** Addresses with counts not yet sent to Redis. */
  pendingSync: number;
  /** Epoch ms of the last sync started (null: none yet). */
  lastSyncAt: number | null;
  /** The busiest addresses by sliding estimate (requests in the window, all isolates as last known). */
  top: { address: string; estimate: number; blocked: boolean }[];
}

export type ListingLimitConfig = Pick<
  Config,
  "LISTING_IP_LIMIT" | "LISTING_IP_WINDOW_MS" | "LISTING_SYNC_MS" | "LISTING_IP_MAX"
>;

/** One isolate's listing limiter (deps.isolate.listingLimit). */
export class ListingLimiter {
  private readonly ips: LRUCache<string, IpCount>;
  /** Addresses with pending counts (≤ LISTING_IP_MAX; beyond it an address's counts stay local). */
  private readonly dirty = new Set<string>();
  private lastSync = Number.NEGATIVE_INFINITY;
  private syncing: Promise<void> | undefined;
  readonly limit: number;
  readonly windowMs: number;
  private readonly syncMs: number;
  private readonly max: number;

  constructor(config: ListingLimitConfig) {
    this.limit = config.LISTING_IP_LIMIT;
    this.windowMs = config.LISTING_IP_WINDOW_MS;
    this.syncMs = config.LISTING_SYNC_MS;
    this.max = config.LISTING_IP_MAX;
    this.ips = new LRUCache<string, IpCount>({ max: this.max });
  }

  /**
   * Counts a request from `ip` at `now` and returns 0, or — over the limit — how long until the
   * estimate falls below it, ms (the request is not counted). No I/O.
   */
  check(ip: string, now: number): number {
    const w = Math.floor(now / this.windowMs);
    let e = this.ips.get(ip);
    if (!e) {
      e = { window: w, mine: 0, pending: 0, inflight: 0, sent: 0, others: 0, prev: 0 };
      this.ips.set(ip, e);
    } else if (e.window !== w) {
      e.prev = e.window === w - 1 ? e.mine + e.others : 0;
      e.window = w;
      e.mine = e.pending = e.inflight = e.sent = e.others = 0;
    }
    const cur = e.mine + e.others;
    const elapsed = now - w * this.windowMs;
    const weight = 1 - elapsed / this.windowMs;
    if (cur + e.prev * weight < this.limit) {
      e.mine++;
      e.pending++;
      if (this.dirty.size < this.max) this.dirty.add(ip);
      return 0;
    }
    // When the estimate drops below the limit with no more requests: within this window only the
    // previous window's share decays; past it, this window's count becomes the decaying share.
    // (+1 ms: at the boundary itself the estimate still equals the limit.)
    if (cur < this.limit)
      return Math.max(1, Math.ceil(this.windowMs * (1 - (this.limit - cur) / e.prev) - elapsed) + 1);
    return Math.max(1, Math.ceil(this.windowMs - elapsed + this.windowMs * (1 - this.limit / cur)) + 1);
  }

  /**
   * The sliding estimate `check` compares with the limit, without counting or rolling the window
   * over (read-only: a snapshot must not change a decision).
   */
  private estimate(e: IpCount, now: number): number {
    const w = Math.floor(now / this.windowMs);
    const weight = 1 - (now - w * this.windowMs) / this.windowMs;
    if (e.window === w) return e.mine + e.others + e.prev * weight;
    if (e.window === w - 1) return (e.mine + e.others) * weight;
    return 0;
  }

  /**
   * Read-only view for the operators' console, from memory (no Redis): one pass over the tracked
   * addresses (≤ LISTING_IP_MAX, default 20,000; LRU iteration does not change recency).
   */
  snapshot(now: number, top = 10): ListingLimitSnapshot {
    let blocked = 0;
    const all: ListingLimitSnapshot["top"] = [];
    for (const [address, e] of this.ips.entries()) {
      const estimate = this.estimate(e, now);
      if (estimate === 0) continue;
      const over = estimate >= this.limit;
      if (over) blocked++;
      all.push({ address, estimate: Math.round(estimate * 10) / 10, blocked: over });
    }
    all.sort((a, b) => b.estimate - a.estimate);
    return {
      limit: this.limit,
      windowMs: this.windowMs,
      tracked: this.ips.size,
      max: this.max,
      blocked,
      pendingSync: this.dirty.size,
      lastSyncAt: Number.isFinite(this.lastSync) ? this.lastSync : null,
      top: all.slice(0, top),
    };
  }

  /** Schedules a background sync when one is due (at most one per LISTING_SYNC_MS, one at a time). */
  maybeSync(deps: Deps, now: number): void {
    if (this.syncing || this.dirty.size === 0 || now - this.lastSync < this.syncMs) return;
    this.lastSync = now;
    deps.waitUntil(this.sync(deps));
  }

  /** Sends the pending counts and applies the global ones: one command (lua/listing-sync.lua). */
  async sync(deps: Deps): Promise<void> {
    // workerd: a running sync is another request's (src/runtime.ts); never await it.
    if (this.syncing && !deps.runtime.sharesIo) return;
    while (this.syncing) await this.syncing;
    this.syncing = this.syncOnce(deps).finally(() => {
      this.syncing = undefined;
    });
    return await this.syncing;
  }

  private async syncOnce(deps: Deps): Promise<void> {
    const w = Math.floor(deps.clock.now() / this.windowMs);
    const batch: { ip: string; e: IpCount; n: number }[] = [];
    for (const ip of this.dirty) {
      if (batch.length >= SYNC_BATCH) break;
      this.dirty.delete(ip);
      const e = this.ips.peek(ip);
      // Evicted, or counts of an older window (they stay local): nothing to send.
      if (!e || e.window !== w || e.pending === 0) continue;
      batch.push({ ip, e, n: e.pending });
      e.inflight += e.pending;
      e.pending = 0;
    }
    if (batch.length === 0) return;
    const args: string[] = [String(3 * this.windowMs)];
    for (const b of batch) args.push(b.ip, String(b.n));
    let res: number[];
    try {
      res = await scriptsFor(deps.redis).listingSync.exec([keys.listingWindow(w), keys.listingWindow(w - 1)], args);
    } catch (err) {
      // Redis unreachable: the counts go back to pending; the per-isolate limit still holds.
      for (const b of batch) {
        if (b.e.window !== w) continue;
        b.e.inflight -= b.n;
        b.e.pending += b.n;
        if (this.dirty.size < this.max) this.dirty.add(b.ip);
      }
      deps.log.warn("listing limit sync failed", { err });
      return;
    }
    batch.forEach((b, i) => {
      const global = Number(res[2 * i] ?? 0);
      const prevGlobal = Number(res[2 * i + 1] ?? 0);
      const e = b.e;
      if (e.window === w) {
        e.inflight -= b.n;
        e.sent += b.n;
        e.others = Math.max(0, global - e.sent);
        e.prev = Math.max(e.prev, prevGlobal);
      } else if (e.window === w + 1) {
        // The window ended while the sync ran: what it learnt is the previous window's total.
        e.prev = Math.max(e.prev, global);
      }
    });
  }
}

/** The routed check (LISTING_PATHS): 429 RATE_LIMITED + Retry-After from memory when over the limit. */
export function listingLimit(deps: Deps): MiddlewareHandler<AppEnv> | undefined {
  const limiter = deps.isolate.listingLimit;
  if (!limiter) return undefined;
  return async (c, next) => {
    const reqDeps = c.get("deps");
    const now = reqDeps.clock.now();
    const waitMs = limiter.check(limitAddress(c, reqDeps.config), now);
    limiter.maybeSync(reqDeps, now);
    if (waitMs > 0)
      throw new AppError("RATE_LIMITED", "too many listing requests from this address", {
        retryAfterSeconds: waitMs / 1000,
      });
    await next();
  };
}

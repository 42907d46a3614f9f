/**
 * The cache modules of the read path, declared once each: loader + policy. Built once per isolate
 * (per Redis client) by `cachesFor`.
 *
 * Strategy choices:
 * - shop (`cache:shop:{id}`): logical — the hottest key family (every list and detail view); a
 *   seckill drop sends thousands of reads at one shop at once, so an expiry must never send them
 *   to MySQL or make them wait: they get the last value while one rebuild runs.
 * - shop-types: plain — ten rows that change almost never; a miss is cheap and rare.
 * - vouchers (per shop): mutex — changes with operator writes and must not be stale for long
 *   (short L2 TTL), and a miss storm on a popular shop is collapsed into one MySQL query.
 * - user card: plain — small, per user, no hot spot.
 * - seckill config: plain with a long L1 — immutable after creation and read on every
 *   reservation, so an L1 hit keeps the reservation at exactly one Redis round trip.
 * Shops and seckill configs have auto-increment ids and a `ceiling` (module.ts): a lookup of an id
 * above the largest one is one Redis command and no MySQL query (issue 16 item 5).
 */
import type { Deps } from "../deps.ts";
import { loadShop, loadShopTypes, maxShopId, loadVouchersOfShop, type Shop, type ShopType, type Voucher } from "../services/shops.ts";
import { getUserCard } from "../services/users.ts";
import type { SessionUser } from "../services/session.ts";
import { loadSeckillConfig, maxSeckillVoucherId, type SeckillConfig } from "../services/seckill/config.ts";
import { fail, ok } from "../errors.ts";
import { HotKeys, type HotKeyRule } from "./hot.ts";
import { CacheMetrics } from "./metrics.ts";
import { type CacheModule, createCacheModule } from "./module.ts";
import { type PreparedResponse, prepareJson } from "./prepared.ts";

/**
 * `opts.hot`: the hot-key rule (cache/hot.ts; off when absent). Every module may be promoted: every
 * write the app makes to their data goes through `set`/`delete` (shops, voucher lists), so the
 * write log covers it; user cards and shop types have no write route, and the seckill config is
 * immutable (its own L1 TTL is already longer than a promoted one, so promotion changes nothing). Redis-only
 * reads outside these modules (GET /api/blog/hot, /api/blog/likes/:id) are not promoted: their
 * answers are per viewer (`isLike`) and change with every like, which would put a write-log entry
 * on every like — see the README's hot-key section.
 * `opts.now`: the L1 clock (tests).
 */
export function createCaches(overrides: Partial<Record<"shop" | "shopTypes" | "vouchers" | "userCard" | "seckill", Partial<import("./module.ts").CachePolicy>>> = {}, opts: { hot?: HotKeyRule; now?: () => number } = {}) {
  const now = opts.now ?? Date.now;
  const isolateId = crypto.randomUUID();
  const hot = opts.hot ? new HotKeys(opts.hot, isolateId, now) : undefined;
  // The three modules served as-is by a GET prepare their envelope once per cached value.
  const shop = createCacheModule<number, Shop, PreparedResponse>({
    name: "shop",
    policy: { strategy: "logical", l2TtlSeconds: 30 * 60, l1TtlMs: 2_000, nullTtlSeconds: 120, ...overrides.shop },
    load: (deps, id) => loadShop(deps, id),
    ceiling: (deps) => maxShopId(deps),
    prepare: (found) => prepareJson(found ? ok(found) : fail("NOT_FOUND", "shop not found")),
  }, now, hot);
  const shopTypes = createCacheModule<string, ShopType[], PreparedResponse>({
    name: "shop-type",
    policy: { strategy: "plain", l2TtlSeconds: 24 * 3600, l1TtlMs: 60_000, ...overrides.shopTypes },
    load: (deps) => loadShopTypes(deps),
    prepare: (types) => prepareJson(ok(types ?? [])),
  }, now, hot);
  const vouchers = createCacheModule<number, Voucher[], PreparedResponse>({
    name: "voucher-list",
    policy: { strategy: "mutex", l2TtlSeconds: 60, l1TtlMs: 1_000, ...overrides.vouchers },
    load: (deps, shopId) => loadVouchersOfShop(deps, shopId),
    prepare: (list) => prepareJson(ok(list ?? [])),
  }, now, hot);
  const userCard = createCacheModule<number, SessionUser>({
    name: "user",
    policy: { strategy: "plain", l2TtlSeconds: 10 * 60, l1TtlMs: 5_000, ...overrides.userCard },
    load: (deps, id) => getUserCard(deps, id),
  }, now, hot);
  const seckill = createCacheModule<number, SeckillConfig>({
    name: "seckill",
    policy: { strategy: "plain", l2TtlSeconds: 24 * 3600, l1TtlMs: 5 * 60_000, nullTtlSeconds: 5, ...overrides.seckill },
    load: (deps, id) => loadSeckillConfig(deps, id),
    ceiling: (deps) => maxSeckillVoucherId(deps),
  }, now, hot);
  const all = [shop, shopTypes, vouchers, userCard, seckill] as unknown as CacheModule<string | number, unknown>[];
  const metrics = new CacheMetrics(all, 5_000, isolateId);
  metrics.hot = hot;
  return { shop, shopTypes, vouchers, userCard, seckill, metrics, hot };
}

export type Caches = ReturnType<typeof createCaches>;

/** The isolate's caches (built once per isolate: deps.isolate.caches). */
export function cachesFor(deps: Pick<Deps, "isolate">): Caches {
  return deps.isolate.caches;
}

/** Tests and benches: install caches with custom policies for a deps instance (its isolate). */
export function installCaches(deps: Pick<Deps, "isolate">, caches: Caches): void {
  deps.isolate.caches = caches;
}

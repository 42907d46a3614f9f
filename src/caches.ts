/**
 * The cache modules of the read path, declared once each — loader, policy, prepared response —
 * where the services are known (cache/ itself knows no domain). Built once per isolate by
 * createIsolate (src/isolate.ts) and reached as `deps.isolate.caches`.
 *
 * Strategy choices:
 * - shop (`cache:{shop:b<n>}:<id>`): logical — the hottest key family (every list and detail view); a
 *   seckill drop sends thousands of reads at one shop at once, so an expiry must never send them
 *   to MySQL or make them wait: they get the last value while one rebuild runs.
 * - shop-types: plain — ten rows that change almost never; a miss is cheap and rare.
 * - vouchers (per shop): mutex — changes with operator writes and must not be stale for long
 *   (short L2 TTL), and a miss storm on a popular shop is collapsed into one MySQL query.
 * - user card: plain — small, per user, no hot spot.
 * - seckill config: plain with a long L1 — immutable after creation and read on every
 *   reservation, so an L1 hit keeps the reservation at exactly one Redis round trip.
 * Stale windows (CachePolicy.l1StaleMs: a value past its L1 freshness answered from memory while one
 * background refresh per key runs; the value served was read from L2 at most l1TtlMs + l1StaleMs
 * ago, and under steady traffic one L2 round trip after its freshness ends it is replaced):
 * shop 30 s, shop types 5 min, vouchers 5 s (operator edits show within 6 s at worst, inside their
 * 60 s L2 TTL), user card 1 min, seckill config 1 h (immutable). Known-missing ids: none.
 * Shops and seckill configs have auto-increment ids and a `ceiling` (cache/policy.ts): a lookup of
 * an id above the largest one is one Redis command and no MySQL query.
 */
import { HotKeys, type HotKeyRule } from "./cache/hot.ts";
import { CacheMetrics } from "./cache/metrics.ts";
import { type CacheModule, type CachePolicy, createCacheModule } from "./cache/module.ts";
import { type PreparedResponse, prepareJson } from "./cache/prepared.ts";
import { fail, ok } from "./errors.ts";
import {
  loadShop,
  loadShopTypes,
  loadVouchersOfShop,
  maxShopId,
  type Shop,
  type ShopType,
  type Voucher,
} from "./services/shops.ts";
import { loadSeckillConfig, maxSeckillVoucherId, type SeckillConfig } from "./services/seckill/config.ts";
import type { SessionUser } from "./services/session.ts";
import { getUserCard } from "./services/users.ts";

/** Policy overrides per module (tests, benches). */
export type CacheOverrides = Partial<
  Record<"shop" | "shopTypes" | "vouchers" | "userCard" | "seckill", Partial<CachePolicy>>
>;

export interface CachesOptions {
  /**
   * Whether Redis answers badly now (the isolate's breaker: `resilience.redis.degraded`): reads
   * with a stale L1 copy serve it instead of queueing behind Redis. Default: never.
   */
  degraded?: () => boolean;
  /**
   * The hot-key rule (cache/hot.ts; off when absent). Every module may be promoted: every write
   * the app makes to their data goes through `set`/`delete` (shops, voucher lists), so the write
   * log covers it; user cards and shop types have no write route, and the seckill config is
   * immutable (its own L1 TTL is already longer than a promoted one, so promotion changes
   * nothing). Redis-only reads outside these modules (GET /api/blog/hot, /api/blog/likes/:id) are
   * not promoted: their answers are per viewer (`isLike`) and change with every like, which would
   * put a write-log entry on every like — see docs/security.md "Hot keys".
   */
  hot?: HotKeyRule;
  /** The L1 clock (tests). */
  now?: () => number;
}

export function createCaches(overrides: CacheOverrides = {}, opts: CachesOptions = {}) {
  const now = opts.now ?? Date.now;
  const isolateId = crypto.randomUUID();
  const hot = opts.hot ? new HotKeys(opts.hot, isolateId, now) : undefined;
  const wiring = { now, hot, degraded: opts.degraded };
  // The three modules served as-is by a GET prepare their envelope once per cached value.
  const shop = createCacheModule<number, Shop, PreparedResponse>(
    {
      name: "shop",
      subject: "shop data",
      policy: {
        strategy: "logical",
        l2TtlSeconds: 30 * 60,
        l1TtlMs: 2_000,
        l1StaleMs: 30_000,
        nullTtlSeconds: 120,
        ...overrides.shop,
      },
      load: (deps, id) => loadShop(deps, id),
      ceiling: (deps) => maxShopId(deps),
      prepare: (found) => prepareJson(found ? ok(found) : fail("NOT_FOUND", "shop not found")),
    },
    wiring,
  );
  const shopTypes = createCacheModule<string, ShopType[], PreparedResponse>(
    {
      name: "shop-type",
      subject: "shop types",
      policy: {
        strategy: "plain",
        l2TtlSeconds: 24 * 3600,
        l1TtlMs: 60_000,
        l1StaleMs: 5 * 60_000,
        ...overrides.shopTypes,
      },
      load: (deps) => loadShopTypes(deps),
      prepare: (types) => prepareJson(ok(types ?? [])),
    },
    wiring,
  );
  const vouchers = createCacheModule<number, Voucher[], PreparedResponse>(
    {
      name: "voucher-list",
      subject: "vouchers",
      policy: { strategy: "mutex", l2TtlSeconds: 60, l1TtlMs: 1_000, l1StaleMs: 5_000, ...overrides.vouchers },
      load: (deps, shopId) => loadVouchersOfShop(deps, shopId),
      prepare: (list) => prepareJson(ok(list ?? [])),
    },
    wiring,
  );
  const userCard = createCacheModule<number, SessionUser>(
    {
      name: "user",
      subject: "user data",
      policy: { strategy: "plain", l2TtlSeconds: 10 * 60, l1TtlMs: 5_000, l1StaleMs: 60_000, ...overrides.userCard },
      load: (deps, id) => getUserCard(deps, id),
    },
    wiring,
  );
  const seckill = createCacheModule<number, SeckillConfig>(
    {
      name: "seckill",
      subject: "voucher data",
      policy: {
        strategy: "plain",
        l2TtlSeconds: 24 * 3600,
        l1TtlMs: 5 * 60_000,
        l1StaleMs: 3_600_000,
        nullTtlSeconds: 5,
        ...overrides.seckill,
      },
      load: (deps, id) => loadSeckillConfig(deps, id),
      ceiling: (deps) => maxSeckillVoucherId(deps),
    },
    wiring,
  );
  const all = [shop, shopTypes, vouchers, userCard, seckill] as unknown as CacheModule<string | number, unknown>[];
  const metrics = new CacheMetrics(all, 5_000, isolateId);
  metrics.hot = hot;
  return { shop, shopTypes, vouchers, userCard, seckill, metrics, hot };
}

export type Caches = ReturnType<typeof createCaches>;

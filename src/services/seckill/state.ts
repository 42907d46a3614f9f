/**
 * A seckill voucher's live state across its databases (GET /admin/seckill/{voucherId}, the console's
 * sale view, services/ops.ts): per shard its stock (per bucket and summed), buyers and share, and
 * the size of the shop's outbox there, read with one MULTI per shard (all shards at once). An
 * unsharded voucher is one entry, shard 0, read from the main database.
 *
 * Each shard's numbers are one atomic read (stock + buyers = share holds within it); the shards
 * are read at about the same moment but not atomically together, so a move between shards in
 * flight (moves.ts) is missing from both for one round trip: the sums are exact at rest.
 */
import type { Deps } from "../../deps.ts";
import { keys } from "../../redis/keys.ts";
import { allBucketKeys, type SeckillConfig } from "./config.ts";
import { shardCountOf, shardsOf } from "./shards.ts";

export interface ShardState {
  shard: number;
  /** Units left in the shard (its buckets summed). */
  stock: number;
  /** Units left per bucket (index = bucket). */
  buckets: number[];
  /** Users holding a unit of this shard. */
  buyers: number;
  /** The shard's share (meta `initial`: its stock at load, moved with the stock); null = not loaded. */
  share: number | null;
  /**
   * The shop's outbox in this database (every voucher of the shop whose reservations land here,
   * this one's among them): entries waiting for MySQL and the oldest one's due time (epoch ms;
   * null when empty).
   */
  shopOutbox: { entries: number; oldestDueMs: number | null };
}

export interface SeckillState {
  voucherId: number;
  shopId: number;
  initialStock: number;
  /** 0 = unsharded (the main database). */
  shardCount: number;
  stock: number;
  buyers: number;
  shards: ShardState[];
}

export async function seckillState(
  deps: Pick<Deps, "redis" | "seckillShards">,
  cfg: SeckillConfig,
): Promise<SeckillState> {
  const { shopId, voucherId } = cfg;
  const shards = await Promise.all(
    shardsOf(deps, cfg).map(async ({ shard, redis }): Promise<ShardState> => {
      const m = redis.multi();
      for (const k of allBucketKeys(cfg)) m.get(k);
      m.scard(keys.seckill.buyers(shopId, voucherId));
      m.hget(keys.seckill.meta(shopId, voucherId), "initial");
      m.hlen(keys.seckill.outbox(shopId));
      m.zrange(keys.seckill.outboxDue(shopId), 0, 0, { withScores: true });
      const res = await m.exec<unknown[]>();
      const buckets = res.slice(0, cfg.buckets).map((v) => Math.max(0, Number(v ?? 0)));
      const share = res[cfg.buckets + 1];
      const oldest = res[cfg.buckets + 3] as (string | number)[] | null | undefined;
      return {
        shard,
        stock: buckets.reduce((a, b) => a + b, 0),
        buckets,
        buyers: Number(res[cfg.buckets] ?? 0),
        share: share === null || share === undefined ? null : Number(share),
        shopOutbox: {
          entries: Number(res[cfg.buckets + 2] ?? 0),
          oldestDueMs: oldest && oldest.length >= 2 ? Number(oldest[1]) : null,
        },
      };
    }),
  );
  return {
    voucherId,
    shopId,
    initialStock: cfg.initialStock,
    shardCount: shardCountOf(cfg),
    stock: shards.reduce((a, s) => a + s.stock, 0),
    buyers: shards.reduce((a, s) => a + s.buyers, 0),
    shards,
  };
}

/**
 * A seckill voucher's live state across its databases (GET /admin/seckill/{voucherId}, the console's
 * sale view): per shard its stock, buyers and share, read with one MULTI per shard. An unsharded
 * voucher is one entry, shard 0, read from the main database.
 */
import type { Deps } from "../../deps.ts";
import { keys } from "../../redis/keys.ts";
import { type SeckillConfig } from "./config.ts";
import { shardCountOf, shardsOf } from "./shards.ts";

export interface ShardState {
  shard: number;
  /** Units left in the shard (its buckets summed). */
  stock: number;
  /** Users holding a unit of this shard. */
  buyers: number;
  /** The shard's share (meta `initial`: its stock at load, moved with the stock); null = not loaded. */
  share: number | null;
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

export async function seckillState(deps: Pick<Deps, "redis" | "seckillShards">, cfg: SeckillConfig): Promise<SeckillState> {
  const { shopId, voucherId } = cfg;
  const shards = await Promise.all(
    shardsOf(deps, cfg).map(async ({ shard, redis }): Promise<ShardState> => {
      const m = redis.multi();
      for (let i = 0; i < cfg.buckets; i++) m.get(keys.seckill.stock(shopId, voucherId, i));
      m.scard(keys.seckill.buyers(shopId, voucherId));
      m.hget(keys.seckill.meta(shopId, voucherId), "initial");
      const res = await m.exec<unknown[]>();
      const stock = res.slice(0, cfg.buckets).reduce<number>((a, v) => a + Math.max(0, Number(v ?? 0)), 0);
      const share = res[cfg.buckets + 1];
      return { shard, stock, buyers: Number(res[cfg.buckets] ?? 0), share: share === null || share === undefined ? null : Number(share) };
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

/**
 * Where a seckill voucher's keys live: one Upstash database serves at most ~10,000
 * commands per second, so a sale bigger than that has its stock sharded across databases.
 *
 * - A voucher created with SECKILL_SHARD_URLS set takes that many shards (`cfg.shards`, fixed for
 *   its life); without, `cfg.shards` is 0 and every key is in the main database, as before.
 * - Every shard holds the voucher's whole key set under the same names (meta, buckets, buyers,
 *   released, the shop's outbox) for its part of the stock: `initial` in its meta is its share
 *   (shareOf), moved with the stock (moves.ts), so each shard's stock + buyers = its initial and
 *   the shares add up to the voucher's stock in MySQL.
 * - A buyer has one home shard, `homeShard(userId, n)` — hash53 of the decimal id mod n —
 *   and every attempt, release and limit of theirs is in it: one order per user, the per-user and
 *   per-address limits, the daily shop limit and the purchase rules are each checked by one script
 *   in one database, as unsharded — except the per-address limit, whose buyers span shards: each
 *   shard checks its part of it (addressLimitIn). Releases (close, payment timeout, reconcile) recompute the home
 *   shard from the order's user, so they go back to the shard that reserved.
 * - A home shard that runs dry while others hold stock takes stock from them (moves.ts) rather
 *   than sending its buyers elsewhere: buyers never change shard, so nothing per user is split.
 */
import type { Deps, RedisPort } from "../../deps.ts";
import { hash53 } from "../../util/hash.ts";
import type { SeckillConfig } from "./config.ts";

/** Shard databases of a voucher: 0 = the main database. */
export function shardCountOf(cfg: Pick<SeckillConfig, "shards">): number {
  return cfg.shards ?? 0;
}

/** The buyer's home shard of `n`: the project's string hash (util/hash.ts) of the decimal id, mod `n` (0 unsharded). */
export function homeShard(userId: number | string, n: number): number {
  return n <= 1 ? 0 : hash53(String(userId)) % n;
}

/** The initial share of shard `i` of `n` for `stock` units: equal parts, the first ones take the remainder. */
export function shareOf(stock: number, n: number, i: number): number {
  if (n <= 1) return stock;
  return Math.floor(stock / n) + (i < stock % n ? 1 : 0);
}

export class ShardUnavailable extends Error {
  constructor(voucherId: number, shards: number, configured: number) {
    super(`voucher ${voucherId} lives in ${shards} seckill shards, ${configured} configured (SECKILL_SHARD_URLS)`);
    this.name = "ShardUnavailable";
  }
}

/** The database of shard `shard` of a voucher (the main one when unsharded). */
export function shardRedis(
  deps: Pick<Deps, "redis" | "seckillShards">,
  cfg: Pick<SeckillConfig, "shards" | "voucherId">,
  shard: number,
): RedisPort {
  const n = shardCountOf(cfg);
  if (n === 0) return deps.redis;
  const r = deps.seckillShards[shard];
  if (!r || shard >= n) throw new ShardUnavailable(cfg.voucherId, n, deps.seckillShards.length);
  return r;
}

/** Every database holding part of a voucher, with its index (one entry, index 0, when unsharded). */
export function shardsOf(
  deps: Pick<Deps, "redis" | "seckillShards">,
  cfg: Pick<SeckillConfig, "shards" | "voucherId">,
): { shard: number; redis: RedisPort }[] {
  const n = Math.max(1, shardCountOf(cfg));
  return Array.from({ length: n }, (_, shard) => ({ shard, redis: shardRedis(deps, cfg, shard) }));
}

/** The database a buyer's attempts and releases of this voucher go to, and its index. */
export function homeOf(
  deps: Pick<Deps, "redis" | "seckillShards">,
  cfg: Pick<SeckillConfig, "shards" | "voucherId">,
  userId: number | string,
): { shard: number; redis: RedisPort } {
  const shard = homeShard(userId, shardCountOf(cfg));
  return { shard, redis: shardRedis(deps, cfg, shard) };
}
/**
 * Shard `shard`'s part of the per-address attempt limit (SECKILL_IP_LIMIT) for a voucher in `n`
 * shards: the address's buyers are homed on every shard (by user id), and each shard's script counts
 * only its own attempts, so the limit is split like the stock (shareOf): the parts add up to `limit`,
 * and the address gets at most `limit` per window in total at no extra command. Every part is ≥ 1
 * because env.ts requires the limit to be 0 (off) or at least the configured shard count.
 */
export function addressLimitIn(limit: number, n: number, shard: number): number {
  return limit === 0 ? 0 : shareOf(limit, n, shard);
}

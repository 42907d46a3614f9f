/**
 * The Redis outbox: the order queue's source of truth between a reservation (reserve-stock.lua
 * writes the entry atomically with the stock decrement) and MySQL (the writer acknowledges the
 * entry after its commit). Per shop: a hash orderId → reservation JSON and a zset orderId → the
 * next time the entry may be claimed (the reservation time at first, pushed out by each claim).
 *
 * Everything that acts on a reservation reads it from here (or from MySQL), never from a message
 * body: message bodies name shops and order ids, the outbox says what was reserved.
 *
 * Where (shards.ts): a shop has one outbox per database its seckill vouchers live in —
 * the main database's (`deps.redis`: every unsharded voucher's reservations, exactly as before
 * shards) and one in each seckill shard (`deps.seckillShards[i]`: the reservations of buyers homed
 * there), under the same key names. An OutboxRef names one; the functions taking
 * `Pick<Deps, "redis">` act on whichever database they are handed (`{ redis: outboxRedis(…) }`).
 */
import type { Deps, RedisPort } from "../../deps.ts";
import { IdGenerator } from "../../redis/ids.ts";
import { keys } from "../../redis/keys.ts";
import { scriptsFor } from "../../redis/scripts.ts";
import { isOrderId } from "../../util/ids.ts";
import type { SeckillConfig } from "./config.ts";
import { shardCountOf } from "./shards.ts";
import type { Reservation } from "./types.ts";

export const parseReservation = (raw: unknown): Reservation =>
  (typeof raw === "string" ? JSON.parse(raw) : raw) as Reservation;

/** One outbox of a shop: in the main database (`shard` absent) or in seckill shard `shard`. */
export interface OutboxRef {
  shopId: number;
  shard?: number;
}

export class ShardNotConfigured extends Error {
  constructor(shard: number, configured: number) {
    super(`seckill shard ${shard} is not configured (SECKILL_SHARD_URLS names ${configured})`);
    this.name = "ShardNotConfigured";
  }
}

/** The database holding an outbox: the main one for `shard` undefined, else that seckill shard (throws ShardNotConfigured if missing). */
export function outboxRedis(deps: Pick<Deps, "redis" | "seckillShards">, shard: number | undefined): RedisPort {
  if (shard === undefined) return deps.redis;
  const r = deps.seckillShards[shard];
  if (!r) throw new ShardNotConfigured(shard, deps.seckillShards.length);
  return r;
}

/**
 * Every outbox the vouchers `cfgs` (the jobs' registry) may have entries in, per shop in order:
 * the main database's when the shop has an unsharded voucher, and shards 0 … n−1 for the most
 * shards n any of its vouchers has. A shop with unsharded vouchers only gives exactly its one
 * main outbox, as before shards.
 */
export function outboxesOf(cfgs: readonly Pick<SeckillConfig, "shopId" | "shards">[]): OutboxRef[] {
  const shops = new Map<number, { main: boolean; shards: number }>();
  for (const c of cfgs) {
    const n = shardCountOf(c);
    const s = shops.get(c.shopId) ?? { main: false, shards: 0 };
    if (n === 0) s.main = true;
    s.shards = Math.max(s.shards, n);
    shops.set(c.shopId, s);
  }
  const out: OutboxRef[] = [];
  for (const [shopId, s] of shops) {
    if (s.main) out.push({ shopId });
    for (let shard = 0; shard < s.shards; shard++) out.push({ shopId, shard });
  }
  return out;
}

/**
 * The outboxes among `refs` whose database this deployment has; one warning for the others (a
 * voucher sharded over more databases than SECKILL_SHARD_URLS names now: shards were removed).
 */
export function reachableOutboxes(deps: Pick<Deps, "seckillShards" | "log">, refs: readonly OutboxRef[]): OutboxRef[] {
  const out = refs.filter((o) => o.shard === undefined || deps.seckillShards[o.shard] !== undefined);
  if (out.length < refs.length) {
    deps.log.error(
      "seckill outboxes in shards that are not configured are skipped (SECKILL_SHARD_URLS lost shards a live voucher uses)",
      {
        configured: deps.seckillShards.length,
        skipped: refs.filter((o) => !out.includes(o)).slice(0, 20),
      },
    );
  }
  return out;
}

/**
 * The order index's value for a reservation (pipeline.ts writes it, findReservation reads it):
 * the shop id for an unsharded voucher (as before shards), "shopId:shard" for a sharded one.
 */
export function indexValueOf(r: Pick<Reservation, "shopId" | "shard">): number | string {
  return r.shard === undefined ? r.shopId : `${r.shopId}:${r.shard}`;
}

/** Parses an order index value (either form); null for anything else. */
export function parseIndexValue(v: unknown): OutboxRef | null {
  if (v === null || v === undefined) return null;
  const [shop, shard, ...rest] = String(v).split(":");
  const shopId = Number(shop);
  if (rest.length > 0 || !Number.isSafeInteger(shopId) || shopId <= 0) return null;
  if (shard === undefined) return { shopId };
  const n = Number(shard);
  if (shard === "" || !Number.isSafeInteger(n) || n < 0) return null;
  return { shopId, shard: n };
}

/** Hour (since the Unix epoch) of an order id's own timestamp: which index key holds it. */
export function indexHourOf(orderId: string): number {
  return Math.floor(IdGenerator.timeOf(BigInt(orderId)) / 3_600_000);
}

/**
 * Claims up to `max` due entries of a shop's outbox for `leaseMs` (claim-outbox.lua): one command.
 * A claimed entry is not handed to another writer until the lease runs out.
 */
export async function claimGroup(
  deps: Pick<Deps, "redis">,
  shopId: number,
  now: number,
  max: number,
  leaseMs: number,
): Promise<Reservation[]> {
  const raw = await scriptsFor(deps.redis).claimOutbox.exec(
    [keys.seckill.outbox(shopId), keys.seckill.outboxDue(shopId)],
    [String(now), String(max), String(leaseMs)],
  );
  return (raw ?? []).map(parseReservation);
}

/** Acknowledges a group of one shop (ack-outbox.lua): one command, whatever the group's size. */
export async function ackGroup(
  deps: Pick<Deps, "redis">,
  shopId: number,
  orderIds: readonly string[],
): Promise<number> {
  if (orderIds.length === 0) return 0;
  return await scriptsFor(deps.redis).ackOutbox.exec(
    [keys.seckill.outbox(shopId), keys.seckill.outboxDue(shopId)],
    [...orderIds],
  );
}

/** Drops one outbox entry, in the reservation's own database, once MySQL has the order (payments: paid before the writer wrote it). */
export async function ackReservation(
  deps: Pick<Deps, "redis" | "seckillShards">,
  r: Pick<Reservation, "shopId" | "orderId" | "shard">,
): Promise<void> {
  await ackGroup({ redis: outboxRedis(deps, r.shard) }, r.shopId, [r.orderId]);
}

/** Outbox entries of `orderIds` in one shop (missing ones are absent from the map). One command. */
export async function outboxEntries(
  deps: Pick<Deps, "redis">,
  shopId: number,
  orderIds: readonly string[],
): Promise<Map<string, Reservation>> {
  const out = new Map<string, Reservation>();
  if (orderIds.length === 0) return out;
  const raw = (await deps.redis.hmget<Record<string, unknown>>(keys.seckill.outbox(shopId), ...orderIds)) ?? {};
  for (const id of orderIds) {
    const v = raw[id];
    if (v === null || v === undefined) continue;
    const r = parseReservation(v);
    // The entry must describe the order it is filed under, in the shop it is filed in.
    if (r.orderId === id && r.shopId === shopId) out.set(id, r);
  }
  return out;
}

/**
 * Finds a reservation still in an outbox (not yet acknowledged by the writer) by order id alone:
 * the hour index (main database) names the shop, and for a sharded voucher the shard (one HGET);
 * that outbox holds the entry (one HGET) — two commands whatever the number of shops, shards or
 * sales. A reservation whose isolate died before its index write is not found here until the
 * writer has put it in MySQL (seconds); the lookup routes read MySQL first.
 */
export async function findReservation(
  deps: Pick<Deps, "redis" | "seckillShards"> & { isolate?: Pick<Deps["isolate"], "orderGroups"> },
  orderId: string,
): Promise<Reservation | null> {
  if (!isOrderId(orderId)) return null;
  // Reserved by this isolate moments ago (index write still gathering): no index read needed.
  const where =
    deps.isolate?.orderGroups.pendingShopOf(orderId) ??
    parseIndexValue(await deps.redis.hget<number | string>(keys.seckill.orderIndex(indexHourOf(orderId)), orderId));
  if (!where) return null;
  // An index naming a shard this deployment does not have: nothing to find (the entry is not reachable).
  if (where.shard !== undefined && !deps.seckillShards[where.shard]) return null;
  return (await outboxEntries({ redis: outboxRedis(deps, where.shard) }, where.shopId, [orderId])).get(orderId) ?? null;
}

/**
 * The Redis outbox: the order queue's source of truth between a reservation (reserve-stock.lua
 * writes the entry atomically with the stock decrement) and MySQL (the writer acknowledges the
 * entry after its commit). Per shop: a hash orderId → reservation JSON and a zset orderId → the
 * next time the entry may be claimed (the reservation time at first, pushed out by each claim).
 *
 * Everything that acts on a reservation reads it from here (or from MySQL), never from a message
 * body: message bodies name shops and order ids, the outbox says what was reserved.
 */
import type { Deps } from "../../deps.ts";
import { IdGenerator } from "../../redis/ids.ts";
import { keys } from "../../redis/keys.ts";
import { scriptsFor } from "../../redis/scripts.ts";
import { isOrderId } from "../../util/ids.ts";
import type { Reservation } from "./types.ts";

export const parseReservation = (raw: unknown): Reservation => (typeof raw === "string" ? JSON.parse(raw) : raw) as Reservation;

/** Hour (since the Unix epoch) of an order id's own timestamp: which index key holds it. */
export function indexHourOf(orderId: string): number {
  return Math.floor(IdGenerator.timeOf(BigInt(orderId)) / 3_600_000);
}

/**
 * Claims up to `max` due entries of a shop's outbox for `leaseMs` (claim-outbox.lua): one command.
 * A claimed entry is not handed to another writer until the lease runs out.
 */
export async function claimGroup(deps: Pick<Deps, "redis">, shopId: number, now: number, max: number, leaseMs: number): Promise<Reservation[]> {
  const raw = await scriptsFor(deps.redis).claimOutbox.exec([keys.seckill.outbox(shopId), keys.seckill.outboxDue(shopId)], [String(now), String(max), String(leaseMs)]);
  return (raw ?? []).map(parseReservation);
}

/** Acknowledges a group of one shop (ack-outbox.lua): one command, whatever the group's size. */
export async function ackGroup(deps: Pick<Deps, "redis">, shopId: number, orderIds: readonly string[]): Promise<number> {
  if (orderIds.length === 0) return 0;
  return await scriptsFor(deps.redis).ackOutbox.exec([keys.seckill.outbox(shopId), keys.seckill.outboxDue(shopId)], [...orderIds]);
}

/** Drops one outbox entry once MySQL has the order (payments: paid before the writer wrote it). */
export async function ackReservation(deps: Pick<Deps, "redis">, r: Pick<Reservation, "shopId" | "orderId">): Promise<void> {
  await ackGroup(deps, r.shopId, [r.orderId]);
}

/** Outbox entries of `orderIds` in one shop (missing ones are absent from the map). One command. */
export async function outboxEntries(deps: Pick<Deps, "redis">, shopId: number, orderIds: readonly string[]): Promise<Map<string, Reservation>> {
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
 * the hour index names the shop (one HGET), the shop's outbox holds the entry (one HGET) — two
 * commands whatever the number of shops or sales. A reservation whose isolate died before its
 * index write is not found here until the writer has put it in MySQL (seconds); the lookup
 * routes read MySQL first.
 */
export async function findReservation(deps: Pick<Deps, "redis"> & Partial<Pick<Deps, "orderGroups">>, orderId: string): Promise<Reservation | null> {
  if (!isOrderId(orderId)) return null;
  // Reserved by this isolate moments ago (index write still gathering): no index read needed.
  const shop = deps.orderGroups?.pendingShopOf(orderId) ?? (await deps.redis.hget<number | string>(keys.seckill.orderIndex(indexHourOf(orderId)), orderId));
  const shopId = Number(shop);
  if (shop === null || shop === undefined || !Number.isSafeInteger(shopId) || shopId <= 0) return null;
  return (await outboxEntries(deps, shopId, [orderId])).get(orderId) ?? null;
}

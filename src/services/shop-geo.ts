/**
 * The nearby-search index: one GEO set per shop type (`shop:geo:{typeId}`, member = shop id).
 * Shop writes update it in place; `rebuildShopGeo` recreates it from MySQL (after an import, a
 * Redis flush, or drift), one type at a time into a temporary key that is renamed over the live
 * one, so readers never see a half-built index.
 */
import type { DbPort, RedisPort } from "../deps.ts";
import { keys } from "../redis/keys.ts";

type GeoMember = { longitude: number; latitude: number; member: string };

/**
 * GEOADD of `members` on a pipeline. @upstash/redis 1.39 drops its first GeoMember argument when
 * that member's latitude is 0 (it tests `arg1.latitude` for truthiness), which made every shop on
 * the equator a failed GEOADD — a 500 after the shop's MySQL commit. Passing an empty options object
 * first sends every member through the path without that check.
 */
function geoAdd(p: ReturnType<RedisPort["pipeline"]>, key: string, members: GeoMember[]): void {
  if (members.length > 0) p.geoadd(key, {}, ...members);
}

interface ShopPoint {
  id: number;
  type_id: number;
  x: number;
  y: number;
}

export async function addShopToGeo(
  redis: RedisPort,
  shop: { id: number; typeId: number; x: number; y: number },
  previousTypeId?: number,
): Promise<void> {
  const p = redis.pipeline();
  if (previousTypeId !== undefined && previousTypeId !== shop.typeId)
    p.zrem(keys.shopGeo(previousTypeId), String(shop.id));
  geoAdd(p, keys.shopGeo(shop.typeId), [{ longitude: shop.x, latitude: shop.y, member: String(shop.id) }]);
  await p.exec();
}

/** Rebuilds every type's index from tb_shop, paging by id; returns the number of shops indexed. */
export async function rebuildShopGeo(
  db: DbPort,
  redis: RedisPort,
  onProgress?: (done: number) => void,
  pageSize = 5000,
): Promise<number> {
  const tmpSuffix = `:rebuild:${Date.now()}`;
  const touched = new Set<number>();
  let lastId = 0;
  let total = 0;
  for (;;) {
    const rows = (
      await db.execute("SELECT id, type_id, x, y FROM tb_shop WHERE id > ? ORDER BY id LIMIT ?", [lastId, pageSize])
    ).rows as unknown as ShopPoint[];
    if (rows.length === 0) break;
    const byType = new Map<number, ShopPoint[]>();
    for (const r of rows) {
      const t = Number(r.type_id);
      const list = byType.get(t) ?? [];
      list.push(r);
      byType.set(t, list);
    }
    const p = redis.pipeline();
    for (const [typeId, list] of byType) {
      touched.add(typeId);
      geoAdd(
        p,
        keys.shopGeo(typeId) + tmpSuffix,
        list.map((r) => ({ longitude: Number(r.x), latitude: Number(r.y), member: String(r.id) })),
      );
    }
    await p.exec();
    total += rows.length;
    lastId = Number(rows[rows.length - 1]?.id ?? lastId);
    onProgress?.(total);
  }
  const swap = redis.pipeline();
  for (const typeId of touched) swap.rename(keys.shopGeo(typeId) + tmpSuffix, keys.shopGeo(typeId));
  if (touched.size > 0) await swap.exec();
  return total;
}

/**
 * Shops, shop types and vouchers: row mapping, origin queries, and the writes (MySQL first, then
 * overwrite the cache entry and the GEO index).
 */
import type { Deps } from "../deps.ts";
import { formatInZone, parseSqlUtc, toSqlUtc } from "../util/time.ts";
import { keys } from "../redis/keys.ts";
import { readNearest } from "../redis/read.ts";
import { addShopToGeo } from "./shop-geo.ts";

export interface Shop {
  id: number;
  name: string;
  typeId: number;
  images: string;
  area: string | null;
  address: string;
  x: number;
  y: number;
  avgPrice: number | null;
  sold: number;
  comments: number;
  score: number;
  openHours: string | null;
  createTime: string;
  updateTime: string;
  /** Only in nearby results: metres from the query point. */
  distance?: number;
}

export interface ShopType {
  id: number;
  name: string;
  icon: string;
  sort: number;
}

export interface Voucher {
  id: number;
  shopId: number;
  title: string;
  subTitle: string | null;
  rules: string | null;
  /** Cents. */
  payValue: number;
  /** Cents. */
  actualValue: number;
  /** 0 normal, 1 seckill. */
  type: number;
  status: number;
  stock?: number;
  beginTime?: string;
  endTime?: string;
}

type Row = Record<string, string | number | null>;

const SHOP_COLUMNS =
  "id, name, type_id, images, area, address, x, y, avg_price, sold, comments, score, open_hours, create_time, update_time";

export function mapShop(r: Row, zone: string): Shop {
  return {
    id: Number(r.id),
    name: String(r.name),
    typeId: Number(r.type_id),
    images: String(r.images ?? ""),
    area: r.area === null ? null : String(r.area),
    address: String(r.address),
    x: Number(r.x),
    y: Number(r.y),
    avgPrice: r.avg_price === null ? null : Number(r.avg_price),
    sold: Number(r.sold),
    comments: Number(r.comments),
    score: Number(r.score),
    openHours: r.open_hours === null ? null : String(r.open_hours),
    createTime: formatInZone(parseSqlUtc(String(r.create_time)), zone),
    updateTime: formatInZone(parseSqlUtc(String(r.update_time)), zone),
  };
}

export async function loadShop(deps: Deps, id: number): Promise<Shop | null> {
  const row = (await deps.db.execute(`SELECT ${SHOP_COLUMNS} FROM tb_shop WHERE id = ?`, [id])).rows[0] as
    | Row
    | undefined;
  return row ? mapShop(row, deps.config.SERVICE_TIME_ZONE) : null;
}

/** The largest shop id (0 with none): ids are auto-increment, so every id above it is absent. */
export async function maxShopId(deps: Deps): Promise<number> {
  const row = (await deps.db.execute("SELECT COALESCE(MAX(id), 0) AS m FROM tb_shop")).rows[0] as Row | undefined;
  return Number(row?.m ?? 0);
}

export async function loadShopTypes(deps: Deps): Promise<ShopType[]> {
  const rows = (await deps.db.execute("SELECT id, name, icon, sort FROM tb_shop_type ORDER BY sort, id")).rows as Row[];
  return rows.map((r) => ({ id: Number(r.id), name: String(r.name), icon: String(r.icon), sort: Number(r.sort) }));
}

export async function loadVouchersOfShop(deps: Deps, shopId: number): Promise<Voucher[]> {
  const zone = deps.config.SERVICE_TIME_ZONE;
  const rows = (
    await deps.db.execute(
      `SELECT v.id, v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, v.actual_value, v.type, v.status,
              s.stock, s.begin_time, s.end_time
         FROM tb_voucher v LEFT JOIN tb_seckill_voucher s ON s.voucher_id = v.id
        WHERE v.shop_id = ? AND v.status = 1
        ORDER BY v.id`,
      [shopId],
    )
  ).rows as Row[];
  return rows.map((r) => {
    const v: Voucher = {
      id: Number(r.id),
      shopId: Number(r.shop_id),
      title: String(r.title),
      subTitle: r.sub_title === null ? null : String(r.sub_title),
      rules: r.rules === null ? null : String(r.rules),
      payValue: Number(r.pay_value),
      actualValue: Number(r.actual_value),
      type: Number(r.type),
      status: Number(r.status),
    };
    if (r.begin_time !== null && r.begin_time !== undefined) {
      v.stock = Number(r.stock);
      v.beginTime = formatInZone(parseSqlUtc(String(r.begin_time)), zone);
      v.endTime = formatInZone(parseSqlUtc(String(r.end_time)), zone);
    }
    return v;
  });
}

export interface ShopInput {
  name: string;
  typeId: number;
  images: string;
  area: string | null;
  address: string;
  x: number;
  y: number;
  avgPrice: number | null;
  openHours: string | null;
  sold?: number;
  comments?: number;
  score?: number;
}

export async function shopTypeExists(deps: Deps, typeId: number): Promise<boolean> {
  return (await deps.db.execute("SELECT 1 FROM tb_shop_type WHERE id = ?", [typeId])).rows.length > 0;
}

export async function insertShop(deps: Deps, s: ShopInput): Promise<number> {
  const res = await deps.db.execute(
    "INSERT INTO tb_shop (name, type_id, images, area, address, x, y, avg_price, sold, comments, score, open_hours) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [
      s.name,
      s.typeId,
      s.images,
      s.area,
      s.address,
      s.x,
      s.y,
      s.avgPrice,
      s.sold ?? 0,
      s.comments ?? 0,
      s.score ?? 0,
      s.openHours,
    ],
  );
  const id = Number(res.insertId);
  await forgetCeiling(deps, "shop", id);
  return id;
}

/**
 * After a commit that added an id to module `name`'s table: the module's ceiling (every id above
 * it is absent, lua/cache-probe.lua) may be below the new id, so the copy of the id's bucket goes; the next miss reads it
 * again. Best effort: if Redis cannot be reached, a ceiling written before hides the new id for at
 * most the module's null TTL, like a null entry would.
 */
export async function forgetCeiling(deps: Pick<Deps, "redis">, name: "shop" | "seckill", id: number): Promise<void> {
  await deps.redis.del(keys.cacheCeiling(name, id)).catch(() => {});
}

/** Applies only the given fields; returns the previous type id, or null when the shop does not exist. */
export async function updateShop(
  deps: Deps,
  id: number,
  patch: Partial<ShopInput>,
): Promise<{ previousTypeId: number } | null> {
  const columns: Record<keyof ShopInput, string> = {
    name: "name",
    typeId: "type_id",
    images: "images",
    area: "area",
    address: "address",
    x: "x",
    y: "y",
    avgPrice: "avg_price",
    openHours: "open_hours",
    sold: "sold",
    comments: "comments",
    score: "score",
  };
  return await deps.db.transaction(async (tx) => {
    const cur = (await tx.execute("SELECT type_id FROM tb_shop WHERE id = ? FOR UPDATE", [id])).rows[0] as
      | Row
      | undefined;
    if (!cur) return null;
    const sets: string[] = [];
    const args: unknown[] = [];
    for (const [k, col] of Object.entries(columns) as [keyof ShopInput, string][]) {
      if (patch[k] !== undefined) {
        sets.push(`${col} = ?`);
        args.push(patch[k]);
      }
    }
    // update_time moves even for a no-op patch, so readers can see the write happened.
    sets.push("update_time = ?");
    args.push(toSqlUtc(deps.clock.now()));
    await tx.execute(`UPDATE tb_shop SET ${sets.join(", ")} WHERE id = ?`, [...args, id]);
    return { previousTypeId: Number(cur.type_id) };
  });
}

export async function refreshShopIndex(deps: Deps, shop: Shop, previousTypeId?: number): Promise<void> {
  await addShopToGeo(deps.redis, shop, previousTypeId);
}

export interface NearbyHit {
  id: number;
  distance: number;
}

/** GEOSEARCH nearest first within `radiusM`; returns one page of ids with distances in metres. */
export async function searchNearby(
  deps: Deps,
  typeId: number,
  x: number,
  y: number,
  page: number,
  pageSize: number,
  radiusM: number,
): Promise<NearbyHit[]> {
  const end = page * pageSize;
  const raw = (await readNearest(deps, (r) =>
    r.geosearch(
      keys.shopGeo(typeId),
      { type: "FROMLONLAT", coordinate: { lon: x, lat: y } },
      { type: "BYRADIUS", radius: radiusM, radiusType: "M" },
      "ASC",
      { count: { limit: end }, withDist: true },
    ),
  )) as { member: string | number; dist?: number }[];
  return raw
    .slice(end - pageSize, end)
    .map((h) => ({ id: Number(h.member), distance: Math.round(Number(h.dist ?? 0) * 100) / 100 }));
}

export async function shopsOfType(deps: Deps, typeId: number, page: number, pageSize: number): Promise<Shop[]> {
  const rows = (
    await deps.db.execute(`SELECT ${SHOP_COLUMNS} FROM tb_shop WHERE type_id = ? ORDER BY id LIMIT ? OFFSET ?`, [
      typeId,
      pageSize,
      (page - 1) * pageSize,
    ])
  ).rows as Row[];
  return rows.map((r) => mapShop(r, deps.config.SERVICE_TIME_ZONE));
}

/** Name search; `%` and `_` in the user's text are literals, not wildcards. */
export async function shopsByName(deps: Deps, name: string, page: number, pageSize: number): Promise<Shop[]> {
  const pattern = `%${name.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
  const rows = (
    await deps.db.execute(`SELECT ${SHOP_COLUMNS} FROM tb_shop WHERE name LIKE ? ORDER BY id LIMIT ? OFFSET ?`, [
      pattern,
      pageSize,
      (page - 1) * pageSize,
    ])
  ).rows as Row[];
  return rows.map((r) => mapShop(r, deps.config.SERVICE_TIME_ZONE));
}

export interface VoucherInput {
  shopId: number;
  title: string;
  subTitle: string | null;
  rules: string | null;
  payValue: number;
  actualValue: number;
}

export async function shopExists(deps: Deps, id: number): Promise<boolean> {
  return (await deps.db.execute("SELECT 1 FROM tb_shop WHERE id = ?", [id])).rows.length > 0;
}

/** Inserts a voucher on sale (type 0 normal, 1 seckill) through `db` or a transaction; returns its id. */
export async function insertVoucher(
  db: Pick<Deps["db"], "execute">,
  v: VoucherInput,
  type: 0 | 1 = 0,
): Promise<number> {
  const res = await db.execute(
    "INSERT INTO tb_voucher (shop_id, title, sub_title, rules, pay_value, actual_value, type, status) VALUES (?, ?, ?, ?, ?, ?, ?, 1)",
    [v.shopId, v.title, v.subTitle, v.rules, v.payValue, v.actualValue, type],
  );
  return Number(res.insertId);
}

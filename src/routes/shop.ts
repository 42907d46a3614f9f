import { Hono } from "hono";
import { z } from "zod";
import { AppError, fail, ok } from "../errors.ts";
import { requireOperator } from "../http/auth.ts";
import { limitAddress } from "../http/client-ip.ts";
import { BODY_LIMITS, jsonBody } from "../http/body.ts";
import { idempotentOperator } from "../http/idempotency.ts";
import { Current, Id, IdParam, INT_UNSIGNED_MAX, JsonId, varchar } from "../http/validate.ts";
import { doc, LISTING_LIMIT_NOTE, v } from "../openapi/describe.ts";
import { NumericId, Shop as ShopSchema, ShopType } from "../openapi/schemas.ts";
import type { Deps } from "../deps.ts";
import {
  insertShop,
  loadShop,
  refreshShopIndex,
  searchNearby,
  shopsByName,
  shopsOfType,
  shopTypeExists,
  updateShop,
  type Shop,
} from "../services/shops.ts";
import type { AppEnv } from "../types.ts";
import { servePrepared } from "../http/edge.ts";
import { parseParams } from "../http/params.ts";

/** Nearby search radius, metres (api.md: within 5 km). */
const NEARBY_RADIUS_M = 5_000;
const TYPE_PAGE_SIZE = 5;
const NAME_PAGE_SIZE = 10;

const Lon = z.coerce.number().min(-180).max(180);
const Lat = z.coerce.number().min(-85.05112878).max(85.05112878);

/** The writable tb_shop columns, each bounded by its column type (001_classic_schema.sql). No defaults here: see ShopBody/ShopPatch. */
const ShopFields = {
  name: varchar(128).trim().min(1),
  typeId: JsonId,
  images: varchar(1024),
  area: varchar(128).nullable(),
  address: varchar(255).trim().min(1),
  x: z.number().min(-180).max(180),
  y: z.number().min(-85.05112878).max(85.05112878),
  /** avg_price BIGINT UNSIGNED (yuan per person). */
  avgPrice: z.number().int().min(0).max(1_000_000).nullable(),
  openHours: varchar(32).nullable(),
  /** sold, comments: INT UNSIGNED. */
  sold: z.number().int().min(0).max(INT_UNSIGNED_MAX),
  comments: z.number().int().min(0).max(INT_UNSIGNED_MAX),
  /** 10× the star rating. */
  score: z.number().int().min(0).max(50),
};
const ShopBody = z.object({
  ...ShopFields,
  images: ShopFields.images.default(""),
  area: ShopFields.area.default(null),
  avgPrice: ShopFields.avgPrice.default(null),
  openHours: ShopFields.openHours.default(null),
  sold: ShopFields.sold.optional(),
  comments: ShopFields.comments.optional(),
  score: ShopFields.score.optional(),
});
/** Only the fields sent are written: no defaults (zod applies a default inside `.partial()`, which blanked unsent columns). */
const ShopPatch = z
  .object({ id: JsonId, ...ShopFields })
  .partial()
  .required({ id: true });

export async function getShopCached(deps: Deps, id: number): Promise<Shop | null> {
  return await deps.isolate.caches.shop.get(deps, id);
}

/** Reloads the row written a moment ago and overwrites L1/L2 with it (write path: MySQL first). */
async function refreshShopCache(deps: Deps, id: number): Promise<Shop | null> {
  const caches = deps.isolate.caches;
  const shop = await loadShop(deps, id);
  await caches.shop.set(deps, id, shop);
  return shop;
}

/**
 * The cache entry and the GEO index after a shop write MySQL has committed. The write's outcome is
 * the commit: a failure here is logged and the route still answers it (so an Idempotency-Key stores
 * the committed outcome and a retry replays it instead of writing the shop again). What is left
 * behind heals by itself: the cache entry expires (its L2 TTL), the index is rebuilt by
 * `npm run geo:rebuild` (or the next write of that shop).
 */
async function afterShopCommit(deps: Deps, id: number, previousTypeId?: number): Promise<void> {
  try {
    const shop = await refreshShopCache(deps, id);
    if (shop) await refreshShopIndex(deps, shop, previousTypeId);
  } catch (err) {
    deps.log.error("shop committed; its cache entry or GEO index was not updated", { shopId: id, err });
  }
}

export const shop = new Hono<AppEnv>()
  .get(
    "/of/type",
    doc(
      {
        tag: "shops",
        summary:
          "Shops of a type, 5 a page; with x/y (together) nearest first within 5 km, each with `distance` in metres",
        description: LISTING_LIMIT_NOTE,
        access: "public",
        data: z.array(ShopSchema),
        errors: ["RATE_LIMITED"],
      },
      v(
        "query",
        z
          .object({ typeId: Id, current: Current, x: Lon.optional(), y: Lat.optional() })
          .refine((q) => (q.x === undefined) === (q.y === undefined), "x and y go together"),
      ),
    ),
    async (c) => {
      const deps = c.get("deps");
      const { typeId, current, x, y } = c.req.valid("query");
      if (x === undefined || y === undefined)
        return c.json(ok(await shopsOfType(deps, typeId, current, TYPE_PAGE_SIZE)));
      const hits = await searchNearby(deps, typeId, x, y, current, TYPE_PAGE_SIZE, NEARBY_RADIUS_M);
      const shops = await Promise.all(hits.map((h) => getShopCached(deps, h.id)));
      // A GEO member whose shop row vanished is skipped (the rebuild script prunes it).
      const list = shops.flatMap((s, i) => (s ? [{ ...s, distance: hits[i]?.distance ?? 0 }] : []));
      return c.json(ok(list));
    },
  )
  .get(
    "/of/name",
    doc(
      {
        tag: "shops",
        summary: "Shops whose name contains `name`, 10 a page",
        description: LISTING_LIMIT_NOTE,
        access: "public",
        data: z.array(ShopSchema),
        errors: ["RATE_LIMITED"],
      },
      v("query", z.object({ name: z.string().trim().max(64).default(""), current: Current })),
    ),
    async (c) => {
      const { name, current } = c.req.valid("query");
      return c.json(ok(await shopsByName(c.get("deps"), name, current, NAME_PAGE_SIZE)));
    },
  )
  .get(
    "/:id",
    doc(
      {
        tag: "shops",
        summary: "A shop (ETag / If-None-Match: 304)",
        description:
          "Lookups of shops that do not exist count against the caller's address (MISS_PER_ADDRESS per MISS_WINDOW_MS per isolate): past it, a lookup the isolate's memory cannot answer is a 429 with Retry-After, before any I/O.",
        access: "public",
        params: IdParam,
        data: ShopSchema,
        outcomes: ["NOT_FOUND"],
        errors: ["UNAVAILABLE", "RATE_LIMITED"],
      },
      (c) => {
        const deps = c.get("deps");
        const shops = deps.isolate.caches.shop;
        const id = parseParams(IdParam, c.req.param()).id;
        // Memory misses are metered per address (http/address-window.ts): refused before any I/O once the
        // address spent its budget of not-found lookups; a read that finds nothing costs one of it.
        if (shops.inMemory(id)) return servePrepared(c, shops, id);
        const address = limitAddress(c, deps.config);
        const now = deps.clock.now();
        const wait = deps.isolate.missMeter.refusedFor(address, now);
        if (wait > 0)
          throw new AppError("RATE_LIMITED", "too many lookups of unknown shops from this address", {
            retryAfterSeconds: wait / 1000,
          });
        return servePrepared(c, shops, id, (value) => {
          if (value === null) deps.isolate.missMeter.count(address, now);
        });
      },
    ),
  )
  .post(
    "/",
    requireOperator,
    jsonBody(BODY_LIMITS.operator),
    doc(
      {
        tag: "operator",
        summary: "Create a shop (MySQL first, then its cache entry and the GEO index)",
        access: "operator",
        data: NumericId,
        outcomes: ["NOT_FOUND"],
        errors: ["INVALID_INPUT"],
      },
      v("json", ShopBody),
    ),
    idempotentOperator(BODY_LIMITS.operator),
    async (c) => {
      const deps = c.get("deps");
      const body = c.req.valid("json");
      if (!(await shopTypeExists(deps, body.typeId))) return c.json(fail("NOT_FOUND", "shop type not found"));
      const id = await insertShop(deps, body);
      await afterShopCommit(deps, id);
      return c.json(ok(id));
    },
  )
  .put(
    "/",
    requireOperator,
    jsonBody(BODY_LIMITS.operator),
    doc(
      {
        tag: "operator",
        summary: "Update a shop: only the fields sent are written",
        access: "operator",
        outcomes: ["NOT_FOUND"],
        errors: ["INVALID_INPUT"],
      },
      v("json", ShopPatch),
    ),
    idempotentOperator(BODY_LIMITS.operator),
    async (c) => {
      const deps = c.get("deps");
      const { id, ...patch } = c.req.valid("json");
      if (patch.typeId !== undefined && !(await shopTypeExists(deps, patch.typeId)))
        return c.json(fail("NOT_FOUND", "shop type not found"));
      const res = await updateShop(deps, id, patch);
      if (!res) return c.json(fail("NOT_FOUND", "shop not found"));
      await afterShopCommit(deps, id, res.previousTypeId);
      return c.json(ok());
    },
  );

export const shopType = new Hono<AppEnv>().get(
  "/list",
  doc(
    {
      tag: "shops",
      summary: "Shop types, ordered by `sort` (ETag / If-None-Match: 304)",
      description: LISTING_LIMIT_NOTE,
      access: "public",
      data: z.array(ShopType),
      errors: ["RATE_LIMITED", "UNAVAILABLE"],
    },
    (c) => servePrepared(c, c.get("deps").isolate.caches.shopTypes, "all"),
  ),
);

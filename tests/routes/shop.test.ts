import { describe, expect, test } from "bun:test";
import { keys } from "../../src/redis/keys.ts";
import { rebuildShopGeo } from "../../src/services/shop-geo.ts";
import { call, loginAs } from "../support/http.ts";
import { createShop, createShopType, east, HANGZHOU, operator } from "../support/fixtures.ts";
import { createTestApp, getStack } from "../support/stack.ts";
import { startFaultProxy } from "../../scripts/stack/fault-proxy.ts";

type ShopOut = {
  id: number;
  name: string;
  typeId: number;
  distance?: number;
  createTime: string;
  x: number;
  y: number;
};

describe("shops", () => {
  test("GET /api/shop/{id} returns the classic shape with local-time dates", async () => {
    const t = await createTestApp();
    const typeId = await createShopType(t);
    const id = await createShop(t, typeId, HANGZHOU, "小河直街面馆");
    const res = await call<ShopOut & Record<string, unknown>>(t.app, "GET", `/api/shop/${id}`);
    expect(res.body.success).toBe(true);
    expect(Object.keys(res.body.data ?? {}).sort()).toEqual(
      [
        "address",
        "area",
        "avgPrice",
        "comments",
        "createTime",
        "id",
        "images",
        "name",
        "openHours",
        "score",
        "sold",
        "typeId",
        "updateTime",
        "x",
        "y",
      ].sort(),
    );
    expect(res.body.data).toMatchObject({ id, name: "小河直街面馆", typeId, x: HANGZHOU.x, y: HANGZHOU.y });
    expect(res.body.data?.createTime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$/);
    expect((await call(t.app, "GET", "/api/shop/987654321")).body).toEqual({
      success: false,
      code: "NOT_FOUND",
      errorMsg: "shop not found",
    });
  });

  test("nearby search returns only shops within 5 km, nearest first, with distances in metres, 5 per page", async () => {
    const t = await createTestApp();
    const typeId = await createShopType(t);
    const metres = [3000, 100, 4900, 1000, 2000, 6000, 400, 12000];
    const ids = new Map<number, number>();
    for (const m of metres) ids.set(m, await createShop(t, typeId, east(HANGZHOU, m), `d${m}`));
    const page1 = await call<ShopOut[]>(
      t.app,
      "GET",
      `/api/shop/of/type?typeId=${typeId}&current=1&x=${HANGZHOU.x}&y=${HANGZHOU.y}`,
    );
    const page2 = await call<ShopOut[]>(
      t.app,
      "GET",
      `/api/shop/of/type?typeId=${typeId}&current=2&x=${HANGZHOU.x}&y=${HANGZHOU.y}`,
    );
    const page3 = await call<ShopOut[]>(
      t.app,
      "GET",
      `/api/shop/of/type?typeId=${typeId}&current=3&x=${HANGZHOU.x}&y=${HANGZHOU.y}`,
    );
    expect(page1.body.data?.map((s) => s.name)).toEqual(["d100", "d400", "d1000", "d2000", "d3000"]);
    expect(page2.body.data?.map((s) => s.name)).toEqual(["d4900"]);
    expect(page3.body.data).toEqual([]);
    for (const s of [...(page1.body.data ?? []), ...(page2.body.data ?? [])]) {
      const expected = Number(s.name.slice(1));
      expect(typeof s.distance).toBe("number");
      expect(Math.abs((s.distance as number) - expected)).toBeLessThan(expected * 0.01 + 1);
    }
  });

  test("without coordinates, shops of a type are paged plainly; other types never mix in", async () => {
    const t = await createTestApp();
    const typeId = await createShopType(t);
    const other = await createShopType(t);
    for (let i = 0; i < 7; i++) await createShop(t, typeId, HANGZHOU, `plain-${i}`);
    await createShop(t, other, HANGZHOU, "other-type");
    const p1 = await call<ShopOut[]>(t.app, "GET", `/api/shop/of/type?typeId=${typeId}`);
    const p2 = await call<ShopOut[]>(t.app, "GET", `/api/shop/of/type?typeId=${typeId}&current=2`);
    expect(p1.body.data?.map((s) => s.name)).toEqual(["plain-0", "plain-1", "plain-2", "plain-3", "plain-4"]);
    expect(p2.body.data?.map((s) => s.name)).toEqual(["plain-5", "plain-6"]);
    expect(p1.body.data?.every((s) => s.distance === undefined)).toBe(true);
  });

  test("changing a shop's type or position moves it in the GEO index; a rebuild restores a lost index", async () => {
    const t = await createTestApp();
    const a = await createShopType(t);
    const b = await createShopType(t);
    const id = await createShop(t, a, east(HANGZHOU, 500), "mover");
    const near = (typeId: number) =>
      call<ShopOut[]>(t.app, "GET", `/api/shop/of/type?typeId=${typeId}&x=${HANGZHOU.x}&y=${HANGZHOU.y}`);
    expect((await near(a)).body.data?.map((s) => s.id)).toEqual([id]);
    const far = east(HANGZHOU, 8000);
    expect(
      (await call(t.app, "PUT", "/api/shop", { token: operator(t), json: { id, typeId: b, x: far.x, y: far.y } })).body
        .success,
    ).toBe(true);
    expect((await near(a)).body.data).toEqual([]);
    expect((await near(b)).body.data).toEqual([]);
    const back = east(HANGZHOU, 700);
    await call(t.app, "PUT", "/api/shop", { token: operator(t), json: { id, x: back.x, y: back.y } });
    expect((await near(b)).body.data?.map((s) => s.id)).toEqual([id]);
    await t.deps.redis.del(keys.shopGeo(b));
    expect((await near(b)).body.data).toEqual([]);
    expect(await rebuildShopGeo(t.deps.db, t.deps.redis)).toBeGreaterThan(0);
    expect((await near(b)).body.data?.map((s) => s.id)).toEqual([id]);
  });

  test("shops on the equator and the prime meridian are created (200) and found by nearby search; a rebuild keeps them", async () => {
    // @upstash/redis drops a GEOADD member whose latitude is 0: this answered 500 after the MySQL commit.
    const t = await createTestApp();
    const typeId = await createShopType(t);
    const points = [
      { x: 10, y: 0 },
      { x: 0, y: 10 },
      { x: 0, y: 0 },
    ];
    const ids: number[] = [];
    for (const at of points) ids.push(await createShop(t, typeId, at));
    for (const [i, at] of points.entries()) {
      const res = await call<ShopOut[]>(t.app, "GET", `/api/shop/of/type?typeId=${typeId}&x=${at.x}&y=${at.y}`);
      expect(res.body.data?.map((s) => s.id)).toEqual([ids[i]!]);
    }
    await t.deps.redis.del(keys.shopGeo(typeId));
    await rebuildShopGeo(t.deps.db, t.deps.redis);
    expect(await t.deps.redis.zcard(keys.shopGeo(typeId))).toBe(3);
  });

  test("a shop write whose GEO update fails after the commit answers the committed outcome, and a keyed retry replays it (one row)", async () => {
    const stack = await getStack();
    const proxy = startFaultProxy(stack.env.UPSTASH_REDIS_REST_URL as string);
    try {
      const t = await createTestApp({ UPSTASH_REDIS_REST_URL: proxy.url, BREAKER_MIN_CALLS: "1000" });
      const typeId = await createShopType(t);
      const name = `geo-fail-${crypto.randomUUID().slice(0, 8)}`;
      const send = () =>
        call<number>(t.app, "POST", "/api/shop", {
          token: operator(t),
          headers: { "idempotency-key": `k-${name}` },
          json: {
            name,
            typeId,
            address: "test road 1",
            x: HANGZHOU.x,
            y: HANGZHOU.y,
            avgPrice: 80,
            images: "/imgs/a.jpg",
            area: "test",
          },
        });
      proxy.set({ kind: "fail", match: "geoadd" });
      const first = await send();
      proxy.set({ kind: "pass" });
      expect({ status: first.status, success: first.body.success }).toEqual({ status: 200, success: true });
      const again = await send();
      expect(again.headers.get("idempotent-replayed")).toBe("true");
      expect(again.body.data).toBe(first.body.data as number);
      const rows = (await t.deps.db.execute("SELECT COUNT(*) AS n FROM tb_shop WHERE name = ?", [name])).rows[0] as {
        n: string;
      };
      expect(Number(rows.n)).toBe(1);
    } finally {
      await proxy.stop();
    }
  });

  test("search by name pages by 10 and treats % and _ literally", async () => {
    const t = await createTestApp();
    const typeId = await createShopType(t);
    const tag = crypto.randomUUID().slice(0, 6);
    for (let i = 0; i < 12; i++) await createShop(t, typeId, HANGZHOU, `${tag}-茶馆-${i}`);
    await createShop(t, typeId, HANGZHOU, `${tag}_x%`);
    const p1 = await call<ShopOut[]>(t.app, "GET", `/api/shop/of/name?name=${encodeURIComponent(`${tag}-茶馆`)}`);
    const p2 = await call<ShopOut[]>(
      t.app,
      "GET",
      `/api/shop/of/name?name=${encodeURIComponent(`${tag}-茶馆`)}&current=2`,
    );
    expect(p1.body.data?.length).toBe(10);
    expect(p2.body.data?.length).toBe(2);
    const literal = await call<ShopOut[]>(t.app, "GET", `/api/shop/of/name?name=${encodeURIComponent(`${tag}_x%`)}`);
    expect(literal.body.data?.map((s) => s.name)).toEqual([`${tag}_x%`]);
    // "%" is no wildcard: no name contains "<tag>%" literally.
    expect(
      (await call<ShopOut[]>(t.app, "GET", `/api/shop/of/name?name=${encodeURIComponent(`${tag}%`)}`)).body.data,
    ).toEqual([]);
  });

  test("shop writes need the operator secret; a user token is not enough", async () => {
    const t = await createTestApp();
    const typeId = await createShopType(t);
    const { token } = await loginAs(t.app, t.deps);
    const body = { name: "x", typeId, address: "a", x: HANGZHOU.x, y: HANGZHOU.y };
    expect((await call(t.app, "POST", "/api/shop", { json: body })).status).toBe(401);
    expect((await call(t.app, "POST", "/api/shop", { json: body, token })).status).toBe(401);
    expect(
      (await call(t.app, "PUT", "/api/shop", { json: { id: 1, name: "y" }, token: `Bearer ${token}` })).status,
    ).toBe(401);
  });

  test("updating a missing shop is NOT_FOUND and writes nothing", async () => {
    const t = await createTestApp();
    const res = await call(t.app, "PUT", "/api/shop", { token: operator(t), json: { id: 876543210, name: "ghost" } });
    expect(res.body).toMatchObject({ success: false, code: "NOT_FOUND" });
    expect(await t.deps.redis.exists(keys.cache("shop", 876543210))).toBe(0);
  });

  test("malformed shop input is a 400 envelope on every shop route", async () => {
    const t = await createTestApp();
    const typeId = await createShopType(t);
    const cases: [string, string, unknown?][] = [
      ["GET", "/api/shop/abc"],
      ["GET", "/api/shop/0"],
      ["GET", "/api/shop/of/type"],
      ["GET", "/api/shop/of/type?typeId=x"],
      ["GET", `/api/shop/of/type?typeId=${typeId}&current=0`],
      ["GET", `/api/shop/of/type?typeId=${typeId}&x=120.1`],
      ["GET", `/api/shop/of/type?typeId=${typeId}&x=500&y=30`],
      ["GET", `/api/shop/of/name?current=-1`],
      ["GET", `/api/shop/of/name?name=${"x".repeat(100)}`],
      ["POST", "/api/shop", { name: "", typeId, address: "a", x: 1, y: 1 }],
      ["POST", "/api/shop", { name: "n", typeId: "one", address: "a", x: 1, y: 1 }],
      ["POST", "/api/shop", { name: "n", typeId, address: "a", x: 181, y: 1 }],
      ["POST", "/api/shop", { name: "n\u0000", typeId, address: "a", x: 1, y: 1 }],
      ["PUT", "/api/shop", { name: "no id" }],
      ["PUT", "/api/shop", { id: 1, score: 99 }],
      ["GET", "/api/voucher/list/abc"],
      ["POST", "/api/voucher", { shopId: 1, title: "t", payValue: -1, actualValue: 1 }],
      ["POST", "/api/voucher", { shopId: 1, title: "t", payValue: 1.5, actualValue: 1 }],
      ["POST", "/api/voucher", { shopId: 1, title: "t", payValue: 3, actualValue: 2 }],
      [
        "POST",
        "/api/voucher/seckill",
        {
          shopId: 1,
          title: "t",
          payValue: 3,
          actualValue: 2,
          stock: 5,
          beginTime: "2026-01-01T00:00:00",
          endTime: "2026-01-02T00:00:00",
        },
      ],
      [
        "POST",
        "/api/voucher/seckill",
        {
          shopId: 1,
          title: "t",
          payValue: 1,
          actualValue: 1,
          stock: 0,
          beginTime: "2026-01-01T00:00:00",
          endTime: "2026-01-02T00:00:00",
        },
      ],
      [
        "POST",
        "/api/voucher/seckill",
        {
          shopId: 1,
          title: "t",
          payValue: 1,
          actualValue: 1,
          stock: 5,
          beginTime: "tomorrow",
          endTime: "2026-01-02T00:00:00",
        },
      ],
    ];
    for (const [method, path, json] of cases) {
      const res = await call(t.app, method, path, { token: operator(t), json });
      expect(res.status, `${method} ${path} ${JSON.stringify(json)}`).toBe(400);
      expect(res.body.success).toBe(false);
      expect(res.body.code).toBe("INVALID_INPUT");
    }
    // Handler-built 400s carry the request id like the validator's.
    const reversedWindow = await call(t.app, "POST", "/api/voucher/seckill", {
      token: operator(t),
      json: {
        shopId: 1,
        title: "t",
        payValue: 1,
        actualValue: 1,
        stock: 5,
        beginTime: "2026-01-02T00:00:00",
        endTime: "2026-01-01T00:00:00",
      },
    });
    expect(reversedWindow.status).toBe(400);
    expect(reversedWindow.body.requestId).toBe(reversedWindow.headers.get("x-request-id") as string);
    // Something that does not exist is a business outcome (api.md), not malformed input.
    const unknownType = await call(t.app, "POST", "/api/shop", {
      token: operator(t),
      json: { name: "n", typeId: 987654, address: "a", x: 1, y: 1 },
    });
    expect({ status: unknownType.status, body: unknownType.body }).toEqual({
      status: 200,
      body: { success: false, code: "NOT_FOUND", errorMsg: "shop type not found" },
    });
    const bad = await call(t.app, "POST", "/api/shop", {
      token: operator(t),
      body: "{",
      headers: { "content-type": "application/json" },
    });
    expect(bad.status).toBe(400);
  });
  test("a shop write replaces the prepared response: new body and ETag at once in the writing isolate, the old ETag no longer 304s", async () => {
    const t = await createTestApp();
    const typeId = await createShopType(t);
    const id = await createShop(t, typeId, HANGZHOU, "before-write");
    const first = await t.app.request(`/api/shop/${id}`);
    const etag = first.headers.get("etag") as string;
    expect(((await first.json()) as { data: ShopOut }).data.name).toBe("before-write");
    expect((await t.app.request(`/api/shop/${id}`, { headers: { "if-none-match": etag } })).status).toBe(304);

    expect(
      (await call(t.app, "PUT", "/api/shop", { token: operator(t), json: { id, name: "after-write" } })).body.success,
    ).toBe(true);
    const after = await t.app.request(`/api/shop/${id}`, { headers: { "if-none-match": etag } });
    expect(after.status).toBe(200);
    expect(after.headers.get("etag")).not.toBe(etag);
    expect(((await after.json()) as { data: ShopOut }).data.name).toBe("after-write");
    // The L2 entry was overwritten too: another isolate serves the new body with the same new ETag.
    const other = await createTestApp();
    const elsewhere = await other.app.request(`/api/shop/${id}`);
    expect(elsewhere.headers.get("etag")).toBe(after.headers.get("etag"));
  });
});

describe("shop types and vouchers", () => {
  test("shop types come ordered by sort", async () => {
    const t = await createTestApp();
    await t.deps.redis.del(keys.cache("shop-type", "all"));
    const res = await call<{ sort: number; id: number; name: string; icon: string }[]>(
      t.app,
      "GET",
      "/api/shop-type/list",
    );
    const sorts = res.body.data?.map((x) => x.sort) ?? [];
    expect(sorts.length).toBeGreaterThan(0);
    expect([...sorts].sort((a, b) => a - b)).toEqual(sorts);
  });

  test("a seckill voucher loads stock and sale window into Redis and lists with stock and times", async () => {
    const t = await createTestApp();
    const shopId = await createShop(t, await createShopType(t));
    await call(t.app, "GET", `/api/voucher/list/${shopId}`);
    const normal = await call<number>(t.app, "POST", "/api/voucher", {
      token: operator(t),
      json: { shopId, title: "50 off", payValue: 4750, actualValue: 5000 },
    });
    const seckill = await call<number>(t.app, "POST", "/api/voucher/seckill", {
      token: operator(t),
      json: {
        shopId,
        title: "flash",
        payValue: 8000,
        actualValue: 10000,
        stock: 100,
        beginTime: "2026-12-01T08:00:00",
        endTime: "2026-12-01T20:00:00",
      },
    });
    expect(normal.body.success && seckill.body.success).toBe(true);
    const vid = seckill.body.data as number;
    expect(Number(await t.deps.redis.get(keys.seckill.stock(shopId, vid, 0)))).toBe(100);
    const window = await t.deps.redis.hgetall<{ begin: number; end: number }>(keys.seckill.meta(shopId, vid));
    // 08:00 in Asia/Shanghai is 00:00 UTC.
    expect(Number(window?.begin)).toBe(Date.UTC(2026, 11, 1, 0, 0, 0));
    expect(Number(window?.end)).toBe(Date.UTC(2026, 11, 1, 12, 0, 0));
    const list = await call<Record<string, unknown>[]>(t.app, "GET", `/api/voucher/list/${shopId}`);
    expect(list.body.data?.length).toBe(2);
    expect(list.body.data?.[1]).toMatchObject({
      id: vid,
      type: 1,
      stock: 100,
      beginTime: "2026-12-01T08:00:00",
      endTime: "2026-12-01T20:00:00",
      payValue: 8000,
    });
    expect(list.body.data?.[0]).not.toHaveProperty("stock");
  });

  test("voucher writes need the operator secret and a real shop; the sale window must be ordered", async () => {
    const t = await createTestApp();
    const shopId = await createShop(t, await createShopType(t));
    const { token } = await loginAs(t.app, t.deps);
    const body = { shopId, title: "x", payValue: 1, actualValue: 2 };
    expect((await call(t.app, "POST", "/api/voucher", { json: body, token })).status).toBe(401);
    expect(
      (await call(t.app, "POST", "/api/voucher/seckill", { json: { ...body, stock: 1, beginTime: 1, endTime: 2 } }))
        .status,
    ).toBe(401);
    expect(
      (await call(t.app, "POST", "/api/voucher", { json: { ...body, shopId: 912345678 }, token: operator(t) })).body,
    ).toEqual({ success: false, code: "NOT_FOUND", errorMsg: "shop not found" });
    const reversed = await call(t.app, "POST", "/api/voucher/seckill", {
      token: operator(t),
      json: { ...body, stock: 5, beginTime: "2026-12-02T00:00:00", endTime: "2026-12-01T00:00:00" },
    });
    expect(reversed.status).toBe(400);
    const count = (await t.deps.db.execute("SELECT COUNT(*) AS n FROM tb_voucher WHERE shop_id = ?", [shopId]))
      .rows[0] as { n: string };
    expect(Number(count.n)).toBe(0);
  });
});

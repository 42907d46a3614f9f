/**
 * The fast lane (src/http/fast-lane.ts) may only skip work: every response it gives must be the
 * one the routed path gives for the same request (status, body, headers but the request id).
 * The routed twin of a request is the same request with a query string, which the lane never takes.
 */
import { describe, expect, test } from "bun:test";
import { call, loginAs } from "../support/http.ts";
import { createShop, createShopType } from "../support/fixtures.ts";
import { createSeckill } from "../support/seckill.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";
import { runtimes } from "../../src/runtime.ts";

function headerMap(h: Headers): Record<string, string> {
  const out: Record<string, string> = {};
  h.forEach((v, k) => {
    if (k !== "x-request-id") out[k] = v;
  });
  return out;
}

async function both(t: TestApp, method: string, path: string, opts: Parameters<typeof call>[3] = {}) {
  const before = { ...t.deps.isolate.fastLane };
  const lane = await call(t.app, method, path, opts);
  const laned =
    t.deps.isolate.fastLane.prepared +
    t.deps.isolate.fastLane.me +
    t.deps.isolate.fastLane.seckill -
    (before.prepared + before.me + before.seckill);
  const routed = await call(t.app, method, `${path}${path.includes("?") ? "&" : "?"}routed=1`, opts);
  return { lane, routed, laned };
}

function expectSame(a: Awaited<ReturnType<typeof call>>, b: Awaited<ReturnType<typeof call>>) {
  expect(a.status).toBe(b.status);
  expect(a.body).toEqual(b.body);
  expect(headerMap(a.headers)).toEqual(headerMap(b.headers));
  expect(a.headers.get("x-request-id")).toBeTruthy();
}

// Both ways of building response headers (src/http/headers.ts): copied (Bun) and set one by one (Deno, workerd).
for (const runtime of [runtimes.bun, runtimes.deno])
  describe(`fast lane (response headers built as on ${runtime.name})`, () => {
    test("an L1-hit shop, shop-type list and 304 answer exactly as the routed path, before routing", async () => {
      const t = await createTestApp({}, { runtime });
      const shopId = await createShop(t, await createShopType(t));
      await call(t.app, "GET", `/api/shop/${shopId}?warm=1`);
      await call(t.app, "GET", "/api/shop-type/list?warm=1");
      const shop = await both(t, "GET", `/api/shop/${shopId}`, { headers: { origin: "https://front.example" } });
      expect(shop.laned).toBe(1);
      expect(shop.lane.body.success).toBe(true);
      expectSame(shop.lane, shop.routed);
      const types = await both(t, "GET", "/api/shop-type/list");
      expect(types.laned).toBe(1);
      expectSame(types.lane, types.routed);
      const etag = shop.lane.headers.get("etag") as string;
      const res304 = await t.app.request(
        `/api/shop/${shopId}`,
        { headers: { "if-none-match": etag } },
        { clientIp: "10.0.0.1" },
      );
      const routed304 = await t.app.request(
        `/api/shop/${shopId}?r=1`,
        { headers: { "if-none-match": etag } },
        { clientIp: "10.0.0.1" },
      );
      expect(res304.status).toBe(304);
      expect(await res304.text()).toBe("");
      expect(headerMap(res304.headers)).toEqual(headerMap(routed304.headers));
      // A caller's safe request id is kept, as on the routed path.
      const withId = await t.app.request(
        `/api/shop/${shopId}`,
        { headers: { "x-request-id": "abc-123" } },
        { clientIp: "10.0.0.1" },
      );
      expect(withId.headers.get("x-request-id")).toBe("abc-123");
      // Unknown or cold ids, and ids that are not plain digits, take the routed path.
      const before = t.deps.isolate.fastLane.prepared;
      expect((await call(t.app, "GET", "/api/shop/0x10")).status).toBe(400);
      expect((await call(t.app, "GET", "/api/shop/987654321")).body).toMatchObject({
        success: false,
        code: "NOT_FOUND",
      });
      expect(t.deps.isolate.fastLane.prepared).toBe(before);
    });

    test("a warm session's /api/user/me and a sold-out or held seckill answer as the routed path, with no Redis call", async () => {
      const t = await createTestApp(
        { SECKILL_USER_LIMIT: "0", SECKILL_IP_LIMIT: "0", SOLD_OUT_MEMO_MS: "60000" },
        { runtime },
      );
      const { token } = await loginAs(t.app, t.deps);
      const other = await loginAs(t.app, t.deps);
      await call(t.app, "GET", "/api/user/me?warm=1", { token });
      await t.deps.isolate.sessions.sync(t.deps);
      const redisBefore = t.stack.rest.stats().commands;
      const me = await call(t.app, "GET", "/api/user/me", { token });
      expect(t.stack.rest.stats().commands).toBe(redisBefore);
      expect(t.deps.isolate.fastLane.me).toBe(1);
      expectSame(me, await call(t.app, "GET", "/api/user/me?routed=1", { token }));
      // Unknown token: routed, 401.
      expect((await call(t.app, "GET", "/api/user/me", { token: "garbage" })).status).toBe(401);

      const { voucherId } = await createSeckill(t, { stock: 1 });
      const bought = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token });
      expect(bought.body.success).toBe(true);
      // The holder asks again: the lane names the order.
      const held = await both(t, "POST", `/api/voucher-order/seckill/${voucherId}`, { token });
      expect(held.laned).toBe(1);
      expect(held.lane.body).toMatchObject({ success: false, code: "DUPLICATE_ORDER", data: bought.body.data });
      expectSame(held.lane, held.routed);
      // Sold out: the first refusal comes from Redis (which lists the buyers in the background), the
      // next from the memo in the lane.
      await call(t.app, "POST", `/api/voucher-order/seckill/${voucherId}?first=1`, { token: other.token });
      await t.settle();
      const soldOut = await both(t, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: other.token });
      expect(soldOut.laned).toBe(1);
      expect(soldOut.lane.body).toMatchObject({ success: false, code: "SOLD_OUT" });
      expectSame(soldOut.lane, soldOut.routed);
      // An attempt with a body the route does not take is the route's 415, not a memory answer.
      const before = t.deps.isolate.fastLane.seckill;
      const res = await t.app.request(
        `/api/voucher-order/seckill/${voucherId}`,
        { method: "POST", headers: { authorization: other.token, "content-type": "text/plain" }, body: "x" },
        { clientIp: "10.0.0.1" },
      );
      expect([
        res.status,
        ((await res.json()) as { code?: string }).code,
        t.deps.isolate.fastLane.seckill - before,
      ]).toEqual([415, "UNSUPPORTED_MEDIA_TYPE", 0]);
      await t.settle();
    });
  });

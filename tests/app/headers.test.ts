import { describe, expect, test } from "bun:test";
import { createShop, createShopType } from "../support/fixtures.ts";
import { createTestApp } from "../support/stack.ts";

/** What hono's secureHeaders sends with our options (CORP cross-origin: images are embedded elsewhere). */
const SECURITY: Record<string, string> = {
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "cross-origin",
  "origin-agent-cluster": "?1",
  "referrer-policy": "no-referrer",
  "strict-transport-security": "max-age=15552000; includeSubDomains",
  "x-content-type-options": "nosniff",
  "x-dns-prefetch-control": "off",
  "x-download-options": "noopen",
  "x-frame-options": "SAMEORIGIN",
  "x-permitted-cross-domain-policies": "none",
  "x-xss-protection": "0",
};

function expectSecurityHeaders(res: Response): void {
  for (const [name, value] of Object.entries(SECURITY)) expect([name, res.headers.get(name)]).toEqual([name, value]);
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

describe("response headers", () => {
  test("/api responses (success and error) carry a request id, the security headers and CORS headers", async () => {
    const { app } = await createTestApp();
    for (const [path, status] of [
      ["/api/shop-type/list", 200],
      ["/api/shop/abc", 400],
      ["/api/user/me", 401],
      ["/api/nope", 404],
    ] as const) {
      const res = await app.request(path, { headers: { origin: "https://front.example" } }, { clientIp: "10.9.9.9" });
      expect([path, res.status]).toEqual([path, status]);
      expect(res.headers.get("x-request-id")).toMatch(UUID);
      expectSecurityHeaders(res);
      expect(res.headers.get("access-control-allow-origin")).toBe("*");
      expect(res.headers.get("access-control-expose-headers")).toBe(
        "x-request-id,retry-after,idempotent-replayed,x-session-token",
      );
      const body = (await res.json()) as { requestId?: string };
      if (status !== 200) expect(body.requestId).toBe(res.headers.get("x-request-id") as string);
    }
  });

  test("an /api preflight is answered 204 with the allowed methods, headers and max age", async () => {
    const { app } = await createTestApp();
    const res = await app.request("/api/shop/1", {
      method: "OPTIONS",
      headers: {
        origin: "https://front.example",
        "access-control-request-method": "PUT",
        "access-control-request-headers": "authorization",
      },
    });
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe("*");
    expect(res.headers.get("access-control-allow-methods")).toBe("GET,HEAD,PUT,POST,DELETE,PATCH,QUERY");
    expect(res.headers.get("access-control-allow-headers")).toBe(
      "authorization,content-type,x-request-id,idempotency-key",
    );
    expect(res.headers.get("access-control-max-age")).toBe("600");
    expect(res.headers.get("x-request-id")).toMatch(UUID);
    expectSecurityHeaders(res);
  });

  test("/imgs responses carry CORS headers; paths browsers do not call cross-origin (/health) only the security headers", async () => {
    const { app } = await createTestApp();
    const img = await app.request("/imgs/blogs/0/no-such-image.png", { headers: { origin: "https://front.example" } });
    expect(img.status).toBe(404);
    expect(img.headers.get("access-control-allow-origin")).toBe("*");
    expectSecurityHeaders(img);
    const health = await app.request("/health", { headers: { origin: "https://front.example" } });
    expect(health.status).toBe(200);
    expect(health.headers.get("x-request-id")).toMatch(UUID);
    expectSecurityHeaders(health);
    expect(health.headers.get("access-control-allow-origin")).toBeNull();
  });

  test("a caller's plain x-request-id is kept, an unsafe one replaced", async () => {
    const { app } = await createTestApp();
    const kept = await app.request("/api/nope", { headers: { "x-request-id": "edge-7f3a_1=" } });
    expect(kept.headers.get("x-request-id")).toBe("edge-7f3a_1=");
    expect(((await kept.json()) as { requestId: string }).requestId).toBe("edge-7f3a_1=");
    const replaced = await app.request("/api/nope", { headers: { "x-request-id": "bad id; drop table" } });
    expect(replaced.headers.get("x-request-id")).toMatch(UUID);
  });

  test("with an origin list, a listed origin is echoed, another gets none, and both vary on Origin", async () => {
    const { app } = await createTestApp({ CORS_ORIGINS: "https://a.example, https://b.example" });
    const listed = await app.request("/api/nope", { headers: { origin: "https://b.example" } });
    expect(listed.headers.get("access-control-allow-origin")).toBe("https://b.example");
    expect(listed.headers.get("vary")).toContain("Origin");
    const other = await app.request("/api/nope", { headers: { origin: "https://evil.example" } });
    expect(other.headers.get("access-control-allow-origin")).toBeNull();
    expect(other.headers.get("vary")).toContain("Origin");
    expectSecurityHeaders(other);
  });
  test("cached GETs carry a strong ETag; a matching If-None-Match is a 304 with no body and every promised header", async () => {
    const t = await createTestApp();
    const shopId = await createShop(t, await createShopType(t));
    for (const path of [
      `/api/shop/${shopId}`,
      "/api/shop-type/list",
      `/api/voucher/list/${shopId}`,
      "/api/shop/987654321",
    ]) {
      const first = await t.app.request(
        path,
        { headers: { origin: "https://front.example" } },
        { clientIp: "10.9.9.8" },
      );
      expect([path, first.status]).toEqual([path, 200]);
      const etag = first.headers.get("etag") as string;
      expect(etag).toMatch(/^"[0-9a-z]+-[0-9a-z]+"$/);
      expect(first.headers.get("content-type")).toBe("application/json");
      const body = await first.text();
      expect(JSON.parse(body)).toHaveProperty("success");
      // The same prepared bytes and tag on every L1 hit.
      const again = await t.app.request(path, {}, { clientIp: "10.9.9.8" });
      expect(again.headers.get("etag")).toBe(etag);
      expect(await again.text()).toBe(body);

      for (const inm of [etag, `W/${etag}`, `"nope", ${etag}`, "*"]) {
        const res = await t.app.request(
          path,
          { headers: { origin: "https://front.example", "if-none-match": inm } },
          { clientIp: "10.9.9.8" },
        );
        expect([path, inm, res.status]).toEqual([path, inm, 304]);
        expect(await res.text()).toBe("");
        expect(res.headers.get("etag")).toBe(etag);
        expect(res.headers.get("x-request-id")).toMatch(UUID);
        expectSecurityHeaders(res);
        expect(res.headers.get("access-control-allow-origin")).toBe("*");
        expect(res.headers.get("access-control-expose-headers")).toBe(
          "x-request-id,retry-after,idempotent-replayed,x-session-token",
        );
      }
      const stale = await t.app.request(path, { headers: { "if-none-match": '"0-0"' } }, { clientIp: "10.9.9.8" });
      expect(stale.status).toBe(200);
      expect(await stale.text()).toBe(body);
    }
  });

  test("HEAD of a cached GET has the ETag and headers but no body", async () => {
    const t = await createTestApp();
    const res = await t.app.request("/api/shop-type/list", { method: "HEAD" });
    expect(res.status).toBe(200);
    expect(res.headers.get("etag")).toBeString();
    expect(res.headers.get("x-request-id")).toMatch(UUID);
    expectSecurityHeaders(res);
    expect(await res.text()).toBe("");
  });
});

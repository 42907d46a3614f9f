/**
 * Oversized requests: a URL or a header block past what the app takes is answered 431 in the
 * envelope (code HEADERS_TOO_LARGE, request id) before routing, on every path including the fast
 * lane. Past the runtime's own parser limit the runtime answers by itself (Bun: a bare 431 with
 * `connection: close` past 16 KiB, over a real Bun.serve below): docs/security.md "Oversized requests".
 */
import { describe, expect, test } from "bun:test";
import { MAX_HEADER_BYTES, MAX_URL_BYTES } from "../../src/http/request-size.ts";
import { createTestApp, serveTestApp } from "../support/stack.ts";

const t = await createTestApp();

async function envelopeOf(res: Response) {
  expect(res.headers.get("content-type")).toContain("application/json");
  return (await res.json()) as { success: boolean; code: string; errorMsg: string; requestId?: string };
}

describe("oversized requests", () => {
  test("a header block past MAX_HEADER_BYTES is a 431 envelope on any route (routed, fast lane, unknown)", async () => {
    for (const path of ["/api/shop/1", "/api/user/me", "/health", "/nope"]) {
      const res = await t.app.request(path, {
        headers: { "x-big": "x".repeat(MAX_HEADER_BYTES), "x-request-id": "big-1" },
      });
      expect([path, res.status]).toEqual([path, 431]);
      expect(await envelopeOf(res)).toMatchObject({ success: false, code: "HEADERS_TOO_LARGE", requestId: "big-1" });
    }
    // Many small headers count as much as one big one.
    const many = Object.fromEntries(Array.from({ length: 400 }, (_, i) => [`x-h${i}`, "v".repeat(20)]));
    expect((await t.app.request("/api/shop/1", { headers: many })).status).toBe(431);
    // Just under the limit: answered as usual.
    const ok = await t.app.request("/health", { headers: { "x-big": "x".repeat(MAX_HEADER_BYTES / 2) } });
    expect(ok.status).not.toBe(431);
  });

  test("a URL past MAX_URL_BYTES is a 431 envelope", async () => {
    const res = await t.app.request(`/api/shop/of/type?typeId=1&x=${"y".repeat(MAX_URL_BYTES)}`);
    expect(res.status).toBe(431);
    expect(await envelopeOf(res)).toMatchObject({ success: false, code: "HEADERS_TOO_LARGE" });
  });

  test("over a real Bun server: the app's limits answer in the envelope; past Bun's own 16 KiB the runtime's bare 431 (documented)", async () => {
    const served = await serveTestApp();
    try {
      const mid = await fetch(`${served.url}/api/shop/1`, { headers: { "x-big": "x".repeat(MAX_HEADER_BYTES) } });
      expect(mid.status).toBe(431);
      expect(await envelopeOf(mid)).toMatchObject({ code: "HEADERS_TOO_LARGE" });
      const longUrl = await fetch(`${served.url}/api/shop/1?x=${"y".repeat(MAX_URL_BYTES)}`);
      expect(longUrl.status).toBe(431);
      expect(await envelopeOf(longUrl)).toMatchObject({ code: "HEADERS_TOO_LARGE" });
      const huge = await fetch(`${served.url}/api/shop/1`, { headers: { "x-big": "x".repeat(20_000) } });
      expect(huge.status).toBe(431);
      expect(await huge.text()).toBe("");
    } finally {
      await served.stop();
    }
  });
});

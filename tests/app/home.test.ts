import { describe, expect, test } from "bun:test";
import { HOME_LINKS } from "../../src/routes/home.tsx";
import { createTestApp } from "../support/stack.ts";

describe("front door (GET /)", () => {
  test("is an HTML page naming the service and linking the console, the API reference, the OpenAPI document and /health", async () => {
    const { app } = await createTestApp();
    const res = await app.request("/");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/html");
    const html = await res.text();
    expect(html.startsWith("<!doctype html>")).toBe(true);
    expect(html).toContain("<title>CityHub Edge</title>");
    expect(html).toContain("Flash-sale backend");
    const links = [...html.matchAll(/<a\b[^>]*\bhref="([^"]*)"/g)].map((m) => m[1]);
    expect(links).toEqual(["/console", "/docs", "/openapi.json", "/health"]);
    expect(HOME_LINKS.map((l) => l.href)).toEqual(links as never);
  });

  test("loads nothing from outside the app: no script, stylesheet or image by URL", async () => {
    const { app } = await createTestApp();
    const html = await (await app.request("/")).text();
    expect(html).not.toMatch(/<(script|img|iframe)\b[^>]*\bsrc=/);
    // The one link is the page's icon, the empty data URL (http/page.tsx): it loads nothing, and the browser asks for no /favicon.ico.
    expect(html).toContain('<link rel="icon" href="data:,"/>');
    expect(html.replace('<link rel="icon" href="data:,"/>', "")).not.toMatch(/<link\b/);
    expect(html).not.toMatch(/https?:\/\//);
  });

  test("carries the request id and the security headers every response has, and no CORS headers", async () => {
    const { app } = await createTestApp();
    const res = await app.request("/", { headers: { origin: "https://front.example", "x-request-id": "home-1" } });
    expect(res.headers.get("x-request-id")).toBe("home-1");
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    expect(res.headers.get("x-frame-options")).toBe("SAMEORIGIN");
    expect(res.headers.get("referrer-policy")).toBe("no-referrer");
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
  });

  test("the JSON API is unchanged beside it: unknown paths are still the 404 envelope", async () => {
    const { app } = await createTestApp();
    for (const path of ["/index.html", "/api", "/console/nope"]) {
      const res = await app.request(path);
      expect([path, res.status]).toEqual([path, 404]);
      expect(((await res.json()) as { code: string }).code).toBe("NOT_FOUND");
    }
  });
});

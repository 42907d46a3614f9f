import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { compileErrors, validate } from "@readme/openapi-parser";
import { codeToStatus } from "../../src/errors.ts";
import { INIT_PATH, VENDOR_FILES, VENDOR_PREFIX } from "../../src/routes/docs.tsx";
import { repoRoot } from "../support/build-worker.ts";
import { createTestApp } from "../support/stack.ts";

type Operation = {
  summary?: string;
  tags?: string[];
  security?: Record<string, string[]>[];
  parameters?: { name: string; in: string; required?: boolean }[];
  requestBody?: { content: Record<string, unknown> };
  responses: Record<string, { description: string; content?: Record<string, { schema: unknown }> }>;
  "x-signed-callback"?: string;
};
type Doc = {
  openapi: string;
  paths: Record<string, Record<string, Operation>>;
  components: { securitySchemes: Record<string, { type: string; name?: string; scheme?: string; in?: string }> };
};

async function documentOf(app: Awaited<ReturnType<typeof createTestApp>>["app"]): Promise<Doc> {
  const res = await app.request("/openapi.json");
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("application/json");
  return (await res.json()) as Doc;
}

/** Route handlers of the app (middleware entries are `ALL` or the global `/*`), as OpenAPI method + path. */
function registeredRoutes(app: Awaited<ReturnType<typeof createTestApp>>["app"]): string[] {
  const routes = new Set<string>();
  for (const r of app.routes) {
    if (r.method === "ALL" || r.path === "/*") continue;
    const path = r.path.replace(/:([A-Za-z0-9_]+)(\{[^}]*\})?/g, "{$1}").replace(/\/\*$/, "/{path}");
    routes.add(`${r.method.toLowerCase()} ${path}`);
  }
  return [...routes].sort();
}

/** Every `code` enum value a response schema names (walks allOf/oneOf). */
function codesIn(schema: unknown): string[] {
  if (!schema || typeof schema !== "object") return [];
  const s = schema as Record<string, unknown>;
  const own = (s.properties as { code?: { enum?: string[] } } | undefined)?.code?.enum ?? [];
  const nested = [...((s.allOf as unknown[]) ?? []), ...((s.oneOf as unknown[]) ?? [])].flatMap(codesIn);
  return [...own, ...nested];
}

const jsonSchemaOf = (op: Operation, status: string) => op.responses[status]?.content?.["application/json"]?.schema;

describe("OpenAPI document (/openapi.json)", () => {
  test("every registered route is in the document, described (summary and tag), with its path parameters", async () => {
    const { app } = await createTestApp();
    const doc = await documentOf(app);
    const routes = registeredRoutes(app);
    expect(routes.length).toBeGreaterThan(40);
    const documented = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.keys(item).map((m) => `${m} ${path}`),
    );
    expect(routes.filter((r) => !documented.includes(r))).toEqual([]);
    // Nothing documented that the app does not answer.
    expect(documented.filter((d) => !routes.includes(d))).toEqual([]);
    for (const route of routes) {
      const [method, path] = route.split(" ") as [string, string];
      const op = doc.paths[path]?.[method] as Operation;
      expect([route, typeof op.summary, op.tags?.length]).toEqual([route, "string", 1]);
      const inPath = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1] as string).sort();
      const declared = (op.parameters ?? [])
        .filter((p) => p.in === "path" && p.required)
        .map((p) => p.name)
        .sort();
      expect([route, declared]).toEqual([route, inPath]);
    }
  });

  test("the document is valid OpenAPI 3.1 (@readme/openapi-parser)", async () => {
    const { app } = await createTestApp();
    const doc = await documentOf(app);
    expect(doc.openapi).toBe("3.1.0");
    const result = await validate(structuredClone(doc) as never);
    expect(result.valid ? "valid" : compileErrors(result)).toBe("valid");
  });

  test("JSON routes answer the envelope, list each error code under the status it is answered with, and 500 INTERNAL everywhere", async () => {
    const { app } = await createTestApp();
    const doc = await documentOf(app);
    let checked = 0;
    for (const [path, item] of Object.entries(doc.paths)) {
      if (!path.startsWith("/api/") && !path.startsWith("/admin") && !path.startsWith("/internal")) continue;
      for (const [method, op] of Object.entries(item)) {
        const where = `${method} ${path}`;
        expect([where, JSON.stringify(jsonSchemaOf(op, "200"))]).toEqual([
          where,
          expect.stringContaining("#/components/schemas/Success"),
        ]);
        expect([where, codesIn(jsonSchemaOf(op, "500"))]).toEqual([where, ["INTERNAL"]]);
        for (const [status, response] of Object.entries(op.responses)) {
          if (status === "200") continue;
          const codes = codesIn(response.content?.["application/json"]?.schema);
          expect([where, status, codes.length > 0]).toEqual([where, status, true]);
          for (const code of codes)
            expect([where, code, codeToStatus[code as keyof typeof codeToStatus] as number]).toEqual([
              where,
              code,
              Number(status),
            ]);
        }
        if (method === "post" || method === "put")
          expect([where, codesIn(jsonSchemaOf(op, "413"))]).toEqual([where, ["PAYLOAD_TOO_LARGE"]]);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(40);
    // The seckill route's business outcomes (200, success:false) and its 429.
    const seckill = doc.paths["/api/voucher-order/seckill/{voucherId}"]?.post as Operation;
    expect(codesIn(jsonSchemaOf(seckill, "200")).sort()).toEqual([
      "DUPLICATE_ORDER",
      "ENDED",
      "LIMIT_REACHED",
      "NOT_FOUND",
      "NOT_STARTED",
      "SOLD_OUT",
    ]);
    expect(codesIn(jsonSchemaOf(seckill, "429"))).toEqual(["RATE_LIMITED"]);
    expect(seckill.responses["429"]).toMatchObject({ headers: { "Retry-After": {} } });
  });

  test("limits and degradation are documented: listing routes 429 RATE_LIMITED, non-core and seckill 503 UNAVAILABLE, uploads 429 RATE_LIMITED / QUOTA_EXCEEDED, each with Retry-After", async () => {
    const { app } = await createTestApp();
    const doc = await documentOf(app);
    const op = (path: string, method: string) => doc.paths[path]?.[method] as Operation;
    const answers = (path: string, method: string, status: string) => {
      const o = op(path, method);
      return {
        codes: codesIn(jsonSchemaOf(o, status)).sort(),
        retryAfter:
          (o.responses[status] as { headers?: Record<string, unknown> } | undefined)?.headers?.["Retry-After"] !==
          undefined,
      };
    };
    for (const path of [
      "/api/shop/of/type",
      "/api/shop/of/name",
      "/api/blog/hot",
      "/api/voucher/list/{shopId}",
      "/api/shop-type/list",
    ]) {
      expect([path, answers(path, "get", "429")]).toEqual([path, { codes: ["RATE_LIMITED"], retryAfter: true }]);
    }
    for (const [path, method] of [
      ["/api/blog/of/follow", "get"],
      ["/api/blog/like/{id}", "put"],
      ["/api/blog/likes/{id}", "get"],
      ["/api/user/sign", "post"],
      ["/api/user/sign/count", "get"],
    ] as const) {
      expect([path, answers(path, method, "503")]).toEqual([path, { codes: ["UNAVAILABLE"], retryAfter: true }]);
    }
    // A reservation whose reply and settling check were both lost (issue 15): retry to learn the order.
    expect(answers("/api/voucher-order/seckill/{voucherId}", "post", "503")).toEqual({
      codes: ["OUTCOME_UNKNOWN", "UNAVAILABLE"],
      retryAfter: true,
    });
    expect(answers("/api/upload/blog", "post", "429")).toEqual({
      codes: ["QUOTA_EXCEEDED", "RATE_LIMITED"],
      retryAfter: true,
    });
  });

  test("protected routes name their security scheme and answer 401; operator routes take the operator Bearer, callbacks are signed", async () => {
    const { app } = await createTestApp();
    const doc = await documentOf(app);
    expect(doc.components.securitySchemes.userToken).toMatchObject({
      type: "apiKey",
      in: "header",
      name: "authorization",
    });
    expect(doc.components.securitySchemes.operatorBearer).toMatchObject({ type: "http", scheme: "bearer" });
    const op = (path: string, method: string) => doc.paths[path]?.[method] as Operation;
    expect(op("/api/user/me", "get").security).toEqual([{ userToken: [] }]);
    expect(codesIn(jsonSchemaOf(op("/api/user/me", "get"), "401"))).toEqual(["UNAUTHORIZED"]);
    expect(op("/api/shop/{id}", "get").security).toBeUndefined();
    expect(op("/api/blog/hot", "get").security).toEqual([{}, { userToken: [] }]);
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, o] of Object.entries(item)) {
        if (path.startsWith("/admin"))
          expect([method, path, o.security]).toEqual([method, path, [{ operatorBearer: [] }]]);
        if (path.startsWith("/internal")) {
          expect([method, path, o.tags, o["x-signed-callback"] !== undefined]).toEqual([
            method,
            path,
            ["callbacks"],
            true,
          ]);
          expect(codesIn(jsonSchemaOf(o, "401"))).toEqual(["UNAUTHORIZED"]);
        }
      }
    }
    for (const [path, method] of [
      ["/api/shop", "post"],
      ["/api/shop", "put"],
      ["/api/voucher", "post"],
      ["/api/voucher/seckill", "post"],
    ] as const) {
      expect(op(path, method).security).toEqual([{ operatorBearer: [] }]);
    }
  });

  test("request schemas come from the routes' validators: query, path and body, input side", async () => {
    const { app } = await createTestApp();
    const doc = await documentOf(app);
    const ofType = doc.paths["/api/shop/of/type"]?.get as Operation;
    expect(ofType.parameters?.map((p) => [p.name, p.in, p.required ?? false])).toEqual([
      ["typeId", "query", true],
      ["current", "query", false],
      ["x", "query", false],
      ["y", "query", false],
    ]);
    const seckill = doc.paths["/api/voucher/seckill"]?.post as Operation;
    const body = seckill.requestBody?.content["application/json"] as {
      schema: { properties: Record<string, unknown>; required: string[] };
    };
    expect(Object.keys(body.schema.properties)).toEqual(
      expect.arrayContaining([
        "shopId",
        "title",
        "payValue",
        "actualValue",
        "stock",
        "beginTime",
        "endTime",
        "buckets",
        "shopDailyLimit",
      ]),
    );
    expect(body.schema.required).toEqual(expect.arrayContaining(["shopId", "title", "stock", "beginTime", "endTime"]));
    expect(body.schema.required).not.toContain("buckets");
    const login = doc.paths["/api/user/login"]?.post as Operation;
    expect(login.requestBody?.content["application/json"]).toMatchObject({
      schema: { properties: { phone: { type: "string" }, code: { type: "string" } } },
    });
  });
});

describe("API reference page (/docs)", () => {
  test("serves HTML whose scripts and stylesheets are all same-origin, each answering 200 with its content type", async () => {
    const { app } = await createTestApp();
    const res = await app.request("/docs");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/html");
    expect(res.headers.get("x-request-id")).toBeString();
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    const html = await res.text();
    expect(html.startsWith("<!doctype html>")).toBe(true);
    const scripts = [...html.matchAll(/<script\b[^>]*\bsrc="([^"]*)"/g)].map((m) => m[1] as string);
    // The page's icon is the empty data URL (http/page.tsx): it loads nothing.
    const styles = [...html.matchAll(/<link\b[^>]*\bhref="([^"]*)"/g)]
      .map((m) => m[1] as string)
      .filter((href) => href !== "data:,");
    expect(scripts).toEqual([`${VENDOR_PREFIX}swagger-ui-bundle.js`, INIT_PATH]);
    expect(styles).toEqual([`${VENDOR_PREFIX}swagger-ui.css`]);
    for (const url of [...scripts, ...styles]) {
      // Same origin: a path, never a scheme or a protocol-relative host.
      expect(new URL(url, "http://edge.test").origin).toBe("http://edge.test");
      const asset = await app.request(url);
      expect([url, asset.status]).toEqual([url, 200]);
      expect(asset.headers.get("content-type")).toContain(url.endsWith(".css") ? "text/css" : "text/javascript");
      expect((await asset.arrayBuffer()).byteLength).toBeGreaterThan(url === INIT_PATH ? 50 : 100_000);
    }
    // Swagger UI would otherwise send the document to an outside validator.
    expect(await (await app.request(INIT_PATH)).text()).toContain("validatorUrl: null");
  });

  test("an asset name outside the page's files is a 404 envelope, never a file read", async () => {
    const { app } = await createTestApp();
    for (const name of ["package.json", "index.html", "..%2Fpackage.json", "swagger-ui.js.map"]) {
      const res = await app.request(`${VENDOR_PREFIX}${name}`);
      expect([name, res.status]).toEqual([name, 404]);
      expect(((await res.json()) as { code: string }).code).toBe("NOT_FOUND");
    }
  });

  test("on Workers the page's files are static assets: wrangler.toml stages exactly them under the same paths", () => {
    const toml = readFileSync(join(repoRoot, "wrangler.toml"), "utf8");
    const dir = /^\[assets\]\s*\ndirectory\s*=\s*"([^"]+)"/m.exec(toml)?.[1];
    const command = /^\[build\]\s*\ncommand\s*=\s*"([^"]+)"/m.exec(toml)?.[1];
    expect(dir).toBeString();
    expect(command).toContain(`mkdir -p ${dir}${VENDOR_PREFIX}`);
    const copied = [...(command ?? "").matchAll(/node_modules\/swagger-ui-dist\/([\w.-]+)/g)].map((m) => m[1]).sort();
    expect(copied).toEqual(Object.keys(VENDOR_FILES).sort());
  });
});

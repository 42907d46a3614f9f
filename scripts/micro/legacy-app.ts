/**
 * The request path as it was before the fused edge middleware (app.ts at 4203988), rebuilt with
 * switches so that the read-path micro-benchmark can remove one per-request step at a time. Only
 * the middleware and the `GET /api/shop/:id` handler are re-created here; every route module is
 * mounted as in app.ts so the router holds the same table.
 */
import { Hono, type MiddlewareHandler } from "hono";
import { cors } from "hono/cors";
import { requestId } from "hono/request-id";
import { TrieRouter } from "hono/router/trie-router";
import { secureHeaders } from "hono/secure-headers";
import { LRUCache } from "lru-cache";
import type { Deps } from "../../src/deps.ts";
import { fail, handleError, ok } from "../../src/errors.ts";
import { IdParam, v } from "../../src/http/validate.ts";
import { clientIp } from "../../src/http/client-ip.ts";
import { isoDay } from "../../src/services/uv.ts";
import { health } from "../../src/routes/health.ts";
import { user } from "../../src/routes/user.ts";
import { admin } from "../../src/routes/admin.ts";
import { shop, shopType } from "../../src/routes/shop.ts";
import { voucher } from "../../src/routes/voucher.ts";
import { voucherOrder } from "../../src/routes/voucher-order.ts";
import { internal } from "../../src/routes/internal.ts";
import { blog } from "../../src/routes/blog.ts";
import { follow } from "../../src/routes/follow.ts";
import { sign } from "../../src/routes/sign.ts";
import { imgs, upload } from "../../src/routes/upload.ts";
import { uv } from "../../src/routes/uv.ts";
import type { AppEnv } from "../../src/types.ts";
import { hash53 } from "../../src/util/hash.ts";

export type Step =
  | "requestId"
  | "childLogger"
  | "depsSpread"
  | "uv"
  | "secureHeaders"
  | "cors"
  | "zodParam"
  | "jsonStringify"
  | "cacheGet"
  | "metricsFlush";
export const STEPS: Step[] = [
  "requestId",
  "childLogger",
  "depsSpread",
  "uv",
  "secureHeaders",
  "cors",
  "zodParam",
  "jsonStringify",
  "cacheGet",
  "metricsFlush",
];

/** The pre-change stack minus the steps in `skip`. `skip` empty = the old app exactly. */
export function createLegacyApp(deps: Deps, skip: ReadonlySet<Step> = new Set()): Hono<AppEnv> {
  const app = new Hono<AppEnv>({ router: new TrieRouter() });
  const noop = async () => {};
  if (!skip.has("requestId")) app.use(requestId({ headerName: "x-request-id", generator: () => crypto.randomUUID() }));
  else
    app.use(async (c, next) => {
      c.set("requestId", "fixed");
      await next();
    });
  app.use(async (c, next) => {
    const rid = c.get("requestId");
    const log = skip.has("childLogger") ? deps.log : deps.log.child({ requestId: rid });
    let waitUntil = deps.waitUntil;
    if (!skip.has("depsSpread")) {
      try {
        const ctx = c.executionCtx;
        waitUntil = (p) => ctx.waitUntil(p.catch((err: unknown) => log.error("background task failed", { err })));
      } catch {
        /* none */
      }
    }
    const reqDeps = waitUntil === deps.waitUntil ? deps : { ...deps, waitUntil };
    c.set("deps", reqDeps);
    c.set("log", log);
    await next();
    if (!skip.has("metricsFlush")) deps.isolate.caches.metrics.maybeFlush(reqDeps);
  });
  if (!skip.has("uv")) {
    const seen = new LRUCache<string, true>({ max: 50_000 });
    let minute = Number.NaN;
    let day = "";
    app.use("/api/*", async (c, next) => {
      await next();
      if (c.req.method === "OPTIONS" || !c.req.path.startsWith("/api/")) return;
      const d = c.get("deps");
      const ip = clientIp(c, d.config.TRUST_PROXY);
      const ua = (c.req.header("user-agent") ?? "").slice(0, 512);
      const now = d.clock.now();
      const m = Math.floor(now / 60_000);
      if (m !== minute) {
        day = isoDay(now, d.config.SERVICE_TIME_ZONE);
        minute = m;
      }
      const key = `${day}|a${hash53(`${ip}\n${ua}`)}`;
      if (seen.has(key)) return;
      seen.set(key, true);
    });
  }
  if (!skip.has("secureHeaders"))
    app.use(secureHeaders({ crossOriginResourcePolicy: "cross-origin", removePoweredBy: false }));
  if (!skip.has("cors")) {
    const corsHeaders = cors({
      origin: "*",
      allowHeaders: ["authorization", "content-type", "x-request-id"],
      exposeHeaders: ["x-request-id", "retry-after"],
      maxAge: 600,
    });
    const corsMw: MiddlewareHandler<AppEnv> = async (c, next) => {
      if (c.req.method === "OPTIONS") return await corsHeaders(c, next);
      await next();
      await corsHeaders(c, noop);
    };
    app.use("/api/*", corsMw);
    app.use("/imgs/*", corsMw);
  }
  const prepared = new Map<number, string>();
  const fixed = new Map<number, unknown>();
  const handler = async (c: import("hono").Context<AppEnv>, id: number) => {
    const d = c.get("deps");
    let found = skip.has("cacheGet") ? fixed.get(id) : undefined;
    if (found === undefined) {
      found = await d.isolate.caches.shop.get(d, id);
      fixed.set(id, found);
    }
    if (skip.has("jsonStringify")) {
      let body = prepared.get(id);
      if (body === undefined)
        prepared.set(id, (body = JSON.stringify(found ? ok(found) : fail("NOT_FOUND", "shop not found"))));
      return c.body(body, 200, { "content-type": "application/json" });
    }
    return c.json(found ? ok(found) : fail("NOT_FOUND", "shop not found"));
  };
  if (skip.has("zodParam")) app.get("/api/shop/:id", (c) => handler(c, Number(c.req.param("id"))));
  else app.get("/api/shop/:id", v("param", IdParam), (c) => handler(c, c.req.valid("param").id));

  app.route("/health", health);
  app.route("/api/user", sign);
  app.route("/api/user", user);
  app.route("/api/blog", blog);
  app.route("/api/follow", follow);
  app.route("/api/upload", upload);
  app.route("/imgs", imgs);
  app.route("/api/shop", shop);
  app.route("/api/shop-type", shopType);
  app.route("/api/voucher", voucher);
  app.route("/api/voucher-order", voucherOrder);
  app.route("/internal", internal);
  app.route("/admin/uv", uv);
  app.route("/admin", admin);
  app.notFound((c) => c.json(fail("NOT_FOUND", "no route", c.get("requestId")), 404));
  app.onError(handleError);
  return app;
}

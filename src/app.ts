/**
 * The app factory: one Hono app for every runtime. Entries build `Deps` once per isolate/process
 * and call `createApp(deps)`; nothing here reads the environment or a runtime global.
 */
import { Hono, type MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { cors } from "hono/cors";
import { requestId } from "hono/request-id";
import { TrieRouter } from "hono/router/trie-router";
import { secureHeaders } from "hono/secure-headers";
import type { Deps } from "./deps.ts";
import { AppError, fail, handleError } from "./errors.ts";
import { health } from "./routes/health.ts";
import { user } from "./routes/user.ts";
import { admin } from "./routes/admin.ts";
import { shop, shopType } from "./routes/shop.ts";
import { voucher } from "./routes/voucher.ts";
import { voucherOrder } from "./routes/voucher-order.ts";
import { internal } from "./routes/internal.ts";
import { blog } from "./routes/blog.ts";
import { follow } from "./routes/follow.ts";
import { sign } from "./routes/sign.ts";
import { imgs, upload, UPLOAD_PATH } from "./routes/upload.ts";
import { uv } from "./routes/uv.ts";
import { uvTracker } from "./http/uv.ts";
import { cachesFor } from "./cache/modules.ts";
import type { AppEnv } from "./types.ts";

/**
 * The paths browsers call cross-origin (the front-end's API calls and its <img>/fetch of uploads).
 * /health, /internal (QStash, payment webhooks) and /admin (operator tools) get no CORS headers.
 */
const CORS_PATHS = ["/api/*", "/imgs/*"] as const;
/**
 * Methods whose bodies the global limit guards. GET/HEAD requests cannot carry one in the Fetch API
 * (Bun and Workers hand the app a null body), and no other method has a route, so no body of theirs is read.
 */
const BODY_METHODS = ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

const noop = async () => {};

export function createApp(deps: Deps): Hono<AppEnv> {
  // TrieRouter directly rather than the default SmartRouter: SmartRouter first tries RegExpRouter,
  // which rejects a parameter next to a static sibling (`/api/user/:id` beside `/api/user/me`,
  // `/api/shop/:id` beside `/api/shop/of/type`, … — the classic client's API), so every isolate
  // paid a failed RegExpRouter build on its first request and then used TrieRouter anyway.
  // LinearRouter/PatternRouter match this route table 2–10× slower than TrieRouter.
  const app = new Hono<AppEnv>({ router: new TrieRouter() });
  const origins = deps.config.CORS_ORIGINS.split(",").map((s) => s.trim()).filter(Boolean);
  // The per-request debug line costs an object, two clock reads and a log call: only when it is written.
  const logRequests = deps.log.enabled("debug");

  app.use(
    requestId({
      headerName: "x-request-id",
      // Accept a caller's id only when it is short and plain (it ends up in logs and headers).
      generator: () => crypto.randomUUID(),
    }),
  );
  app.use(async (c, next) => {
    const rid = c.get("requestId");
    // Cheap: the child only records its fields until a line is written (src/log.ts).
    const log = deps.log.child({ requestId: rid });
    // Background work must be tied to this request's ExecutionContext on Workers (and the Bun
    // shim): rebinding here keeps services runtime-agnostic. `executionCtx` throws when the
    // runtime passed none (app.request in tests): then the process-level fallback is used.
    let waitUntil = deps.waitUntil;
    try {
      const ctx = c.executionCtx;
      waitUntil = (p) => ctx.waitUntil(p.catch((err: unknown) => log.error("background task failed", { err })));
    } catch {
      /* no ExecutionContext: keep the fallback */
    }
    const reqDeps = waitUntil === deps.waitUntil ? deps : { ...deps, waitUntil };
    c.set("deps", reqDeps);
    c.set("log", log);
    const started = logRequests ? performance.now() : 0;
    await next();
    // Cache counters reach Redis in the background, at most every few seconds per isolate.
    cachesFor(deps).metrics.maybeFlush(reqDeps);
    if (!logRequests) return;
    log.debug("request", {
      method: c.req.method,
      path: c.req.path,
      status: c.res.status,
      ms: Math.round((performance.now() - started) * 100) / 100,
    });
  });
  // Daily unique visitors (HyperLogLog), recorded in the background after each /api response.
  app.use("/api/*", uvTracker());
  // No X-Powered-By is ever set (not by Hono, the app or the runtimes' Response), so the
  // middleware's per-response delete of it is skipped.
  app.use(secureHeaders({ crossOriginResourcePolicy: "cross-origin", removePoweredBy: false }));
  const corsHeaders = cors({
    origin: origins.includes("*") ? "*" : origins,
    allowHeaders: ["authorization", "content-type", "x-request-id"],
    exposeHeaders: ["x-request-id", "retry-after"],
    maxAge: 600,
  });
  // Preflights are answered by hono's cors as usual. For other requests it only adds headers, but
  // it adds them to `c.res` *before* the handler runs, which makes Hono build a placeholder
  // Response and then copy it into the handler's (a second Response + header copies per request).
  // Running it after the handler writes the same headers straight onto the final response.
  const corsMw: MiddlewareHandler<AppEnv> = async (c, next) => {
    if (c.req.method === "OPTIONS") return await corsHeaders(c, next);
    await next();
    await corsHeaders(c, noop);
  };
  for (const path of CORS_PATHS) app.use(path, corsMw);
  // Image uploads have their own, larger limit (UPLOAD_MAX_BYTES, src/routes/upload.ts). A plain
  // path check rather than hono/combine's `except`, which allocates an Error on every request.
  const limitBody = bodyLimit({
    maxSize: deps.config.MAX_BODY_BYTES,
    onError: () => {
      throw new AppError("PAYLOAD_TOO_LARGE", `body larger than ${deps.config.MAX_BODY_BYTES} bytes`);
    },
  });
  app.on(BODY_METHODS, "*", (c, next) => (c.req.path === UPLOAD_PATH ? next() : limitBody(c, next)));

  app.route("/health", health);
  // Before `user`: its `/:id` would otherwise shadow `/sign/count`.
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

  app.notFound((c) => c.json(fail("NOT_FOUND", `no route for ${c.req.method} ${c.req.path}`, c.get("requestId")), 404));
  app.onError(handleError);
  return app;
}

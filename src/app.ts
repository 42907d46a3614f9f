/**
 * The app factory: one Hono app for every runtime. Entries build `Deps` once per isolate/process
 * and call `createApp(deps)`; nothing here reads the environment or a runtime global.
 */
import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { cors } from "hono/cors";
import { requestId } from "hono/request-id";
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

export function createApp(deps: Deps): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  const origins = deps.config.CORS_ORIGINS.split(",").map((s) => s.trim()).filter(Boolean);

  app.use(
    requestId({
      headerName: "x-request-id",
      // Accept a caller's id only when it is short and plain (it ends up in logs and headers).
      generator: () => crypto.randomUUID(),
    }),
  );
  app.use(async (c, next) => {
    const rid = c.get("requestId");
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
    c.set("deps", waitUntil === deps.waitUntil ? deps : { ...deps, waitUntil });
    c.set("log", log);
    const started = performance.now();
    await next();
    // Cache counters reach Redis in the background, at most every few seconds per isolate.
    cachesFor(deps).metrics.maybeFlush(c.get("deps"));
    log.debug("request", {
      method: c.req.method,
      path: c.req.path,
      status: c.res.status,
      ms: Math.round((performance.now() - started) * 100) / 100,
    });
  });
  // Daily unique visitors (HyperLogLog), recorded in the background after each /api response.
  app.use(uvTracker());
  app.use(secureHeaders({ crossOriginResourcePolicy: "cross-origin" }));
  app.use(
    cors({
      origin: origins.includes("*") ? "*" : origins,
      allowHeaders: ["authorization", "content-type", "x-request-id"],
      exposeHeaders: ["x-request-id", "retry-after"],
      maxAge: 600,
    }),
  );
  // Image uploads have their own, larger limit (UPLOAD_MAX_BYTES, src/routes/upload.ts). A plain
  // path check rather than hono/combine's `except`, which allocates an Error on every request.
  const limitBody = bodyLimit({
    maxSize: deps.config.MAX_BODY_BYTES,
    onError: () => {
      throw new AppError("PAYLOAD_TOO_LARGE", `body larger than ${deps.config.MAX_BODY_BYTES} bytes`);
    },
  });
  app.use((c, next) => (c.req.path === UPLOAD_PATH ? next() : limitBody(c, next)));

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

/**
 * The app factory: one Hono app for every runtime. Entries build `Deps` once per isolate/process
 * and call `createApp(deps)`; nothing here reads the environment or a runtime global.
 */
import { Hono } from "hono";
import { TrieRouter } from "hono/router/trie-router";
import { CacheUnavailableError } from "./cache/module.ts";
import type { Deps } from "./deps.ts";
import { AppError, fail, handleError } from "./errors.ts";
import { health } from "./routes/health.ts";
import { user } from "./routes/user.ts";
import { admin } from "./routes/admin.ts";
import { metrics } from "./routes/metrics.ts";
import { shop, shopType } from "./routes/shop.ts";
import { voucher } from "./routes/voucher.ts";
import { voucherOrder } from "./routes/voucher-order.ts";
import { internal } from "./routes/internal.ts";
import { blog } from "./routes/blog.ts";
import { follow } from "./routes/follow.ts";
import { sign } from "./routes/sign.ts";
import { imgs, upload, UPLOAD_PATH } from "./routes/upload.ts";
import { uv } from "./routes/uv.ts";
import { home } from "./routes/home.tsx";
import { createDocs } from "./routes/docs.tsx";
import { consolePages } from "./routes/console.tsx";
import { createEdge } from "./http/edge.ts";
import type { AppEnv } from "./types.ts";
import { streamLimit } from "./http/body.ts";
import { createFastLane } from "./http/fast-lane.ts";
import { LISTING_PATHS, listingLimit } from "./http/listing-limit.ts";
import { requestIdOf } from "./http/edge.ts";
import { oversizedResponse } from "./http/request-size.ts";
import { shedResponse } from "./http/shed.ts";

/**
 * Methods whose bodies the global limit guards. GET/HEAD requests cannot carry one in the Fetch API
 * (Bun and Workers hand the app a null body), and no other method has a route, so no body of theirs is read.
 */
const BODY_METHODS = ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

export function createApp(deps: Deps): Hono<AppEnv> {
  // TrieRouter directly rather than the default SmartRouter: SmartRouter first tries RegExpRouter,
  // which rejects a parameter next to a static sibling (`/api/user/:id` beside `/api/user/me`,
  // `/api/shop/:id` beside `/api/shop/of/type`, … — the classic client's API), so every isolate
  // paid a failed RegExpRouter build on its first request and then used TrieRouter anyway.
  // LinearRouter/PatternRouter match this route table 2–10× slower than TrieRouter.
  const app = new Hono<AppEnv>({ router: new TrieRouter() });
  // Request id, per-request deps and logger, security headers, CORS, UV and cache metrics, fused
  // into one middleware: measured per step in src/http/edge.ts (the L1 read path's budget).
  app.use(createEdge(deps));
  // Image uploads have their own, larger limit (UPLOAD_MAX_BYTES, src/routes/upload.ts). A plain
  // path check rather than hono/combine's `except`, which allocates an Error on every request.
  const limitBody = streamLimit(deps.config.MAX_BODY_BYTES);
  app.on(BODY_METHODS, "*", (c, next) => (c.req.path === UPLOAD_PATH ? next() : limitBody(c, next)));
  // Per-IP sliding window on the anonymous listing/search routes (GET only; they have no other method).
  const listing = listingLimit(deps);
  if (listing) for (const path of LISTING_PATHS) app.use(path, listing);

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
  app.route("/metrics", metrics);
  app.route("/console", consolePages);
  // The front door and the API reference (HTML pages, /openapi.json); last, as the reference
  // documents the route table above.
  app.route("/", home);
  app.route("/", createDocs(app));

  app.notFound((c) => c.json(fail("NOT_FOUND", `no route for ${c.req.method} ${c.req.path}`, c.get("requestId")), 404));
  // A cache read that neither origin nor any cached copy could answer is a 503 naming the data
  // (with Retry-After when a breaker caused it, errors.ts), wherever the read was made.
  app.onError((err, c) =>
    handleError(
      err instanceof CacheUnavailableError
        ? new AppError("UNAVAILABLE", `${err.subject} temporarily unavailable`, { cause: err })
        : err,
      c,
    ),
  );
  // Requests answerable from the isolate's memory skip routing (http/fast-lane.ts). `app.request`
  // (tests) goes through `fetch` too, so tests see exactly what a runtime sees.
  const lane = createFastLane(deps);
  if (lane) {
    const routed = app.fetch;
    app.fetch = (req, env, ctx) => lane(req, env, ctx) ?? routed(req, env, ctx);
  }
  // Outermost: an isolate past its capacity refuses the surplus before routing, bodies or I/O
  // (http/shed.ts); an admitted request counts as in flight until its response is ready.
  const shed = deps.isolate.shed;
  const admitted = app.fetch;
  app.fetch = (req, env, ctx) => {
    if (shed.admit() !== undefined) return shedResponse(requestIdOf(req.headers));
    let res: Response | Promise<Response>;
    try {
      res = admitted(req, env, ctx);
    } catch (err) {
      shed.done();
      throw err;
    }
    if (res instanceof Promise) return res.finally(() => shed.done());
    shed.done();
    return res;
  };
  // Before everything: a URL or header block past the app's limits is a 431 envelope (http/request-size.ts).
  const sized = app.fetch;
  app.fetch = (req, env, ctx) => oversizedResponse(req) ?? sized(req, env, ctx);
  return app;
}

/**
 * The edge middleware: everything the app does around every request, fused into one middleware
 * (one async frame) instead of six (request id, deps, UV, secure headers, CORS, metrics), plus
 * `servePrepared`, the L1-hit path of the cached GETs.
 *
 * Measured decisions (scripts/micro/read-path.bench.ts: in-process app.fetch of an L1-hit
 * `GET /api/shop/{id}` incl. reading the body, CPU µs/op, median of 7 interleaved rounds of 10,000;
 * the old stack 14.6 µs, a Hono hello-world 2.3 µs). What removing one step from the old stack saved:
 *   secureHeaders  −2.6 (11 `headers.set` + a frame)   → kept, one loop here (headers are the contract)
 *   UV             −1.9 (headers, strings, LRU, frame)  → kept, numeric seen key, batched sends
 *   zod param      −1.7 (validator frame + parse)       → same schema, parsed synchronously (params.ts)
 *   JSON.stringify −1.5                                → prepared once per cached value
 *   CORS           −1.5 (frame, header reads)           → kept, inlined for simple requests
 *   request id     −1.4 (frame + c.header; UUID 0.05)   → kept (UUID is cheap), inlined
 *   Deps spread    −1.0                                → memoised per ExecutionContext
 *   metrics flush  −0.8                                → kept (one clock read when not due)
 *   child logger   −0.8 (7 closures)                   → made lazy (RequestLog)
 *   cache get      −0.6 (async L1 read)                → synchronous `serve` on a fresh hit
 * Result: 8.7 µs (304: 9.2) vs 14.6 before and 2.3 for hello-world; all steps removed together
 * would be 5.8 (routing the full route table, compose, the Response). Header writes are now the largest
 * cost left (~0.15 µs per `headers.set` on Bun, 16 per response, all promised by docs/api.md).
 */
import type { Context, ExecutionContext, MiddlewareHandler } from "hono";
import { cors } from "hono/cors";
import type { CacheModule } from "../cache/module.ts";
import { etagMatches, type PreparedResponse } from "../cache/prepared.ts";
import type { Deps } from "../deps.ts";
import type { Logger } from "../log.ts";
import type { AppEnv } from "../types.ts";
import { NO_TRIPS, RequestTrips, tripScope } from "../util/trips.ts";
import { isOperator } from "./auth.ts";
import { trackVisit } from "./uv.ts";

/**
 * What hono's secureHeaders sent with our options (CORP cross-origin: images are embedded
 * elsewhere; no CSP, no COEP), in the same order. tests/app/headers.test.ts pins the values.
 */
export const SECURITY_HEADERS: readonly (readonly [string, string])[] = [
  ["cross-origin-resource-policy", "cross-origin"],
  ["cross-origin-opener-policy", "same-origin"],
  ["origin-agent-cluster", "?1"],
  ["referrer-policy", "no-referrer"],
  ["strict-transport-security", "max-age=15552000; includeSubDomains"],
  ["x-content-type-options", "nosniff"],
  ["x-dns-prefetch-control", "off"],
  ["x-download-options", "noopen"],
  ["x-frame-options", "SAMEORIGIN"],
  ["x-permitted-cross-domain-policies", "none"],
  ["x-xss-protection", "0"],
];

const CORS_ALLOW_HEADERS = ["authorization", "content-type", "x-request-id", "idempotency-key"];
/** Response headers browsers may read cross-origin (`x-session-token`: a re-issued session token, http/auth.ts). */
export const CORS_EXPOSE = "x-request-id,retry-after,idempotent-replayed,x-session-token";
/** hono/request-id's rule: a caller's id is kept when ≤ 255 chars of `[\w\-=]`. */
const UNSAFE_REQUEST_ID = /[^\w\-=]/;

/** The request's id: the caller's when it is short and plain (it ends up in logs and headers), else a new UUID. */
export function requestIdOf(headers: Headers): string {
  const given = headers.get("x-request-id");
  return given && given.length <= 255 && !UNSAFE_REQUEST_ID.test(given) ? given : crypto.randomUUID();
}

/**
 * Deps for one request, with background work tied to the request's ExecutionContext (Workers, and
 * the Bun shim). Bun's entry passes one shim for the process, Workers a fresh one per request:
 * remembering the last one makes the Deps copy a one-off on Bun and leaves Workers as before.
 * Without a context (app.request in tests) the process-level fallback is used.
 */
export function requestDepsMemo(deps: Deps): (ctx: ExecutionContext | undefined) => Deps {
  let memoCtx: ExecutionContext | undefined;
  let memoDeps = deps;
  return (ctx) => {
    if (!ctx) return deps;
    if (ctx !== memoCtx) {
      memoCtx = ctx;
      memoDeps = {
        ...deps,
        waitUntil: (p) => ctx.waitUntil(p.catch((err: unknown) => deps.log.error("background task failed", { err }))),
      };
    }
    return memoDeps;
  };
}

/**
 * `/api` and `/imgs` (and below): the paths browsers call cross-origin (the front-end's API calls
 * and its <img>/fetch of uploads). /health, /internal and /admin get no CORS headers.
 */
function isCorsPath(path: string): boolean {
  return path.startsWith("/api")
    ? path.length === 4 || path.charCodeAt(4) === 47
    : path.startsWith("/imgs") && (path.length === 5 || path.charCodeAt(5) === 47);
}

/**
 * The request's logger, bound to its id. Built on first use: most requests never log, and a child
 * logger costs seven closures. Getters return the child's own (arrow) methods, so `log.warn` may
 * still be passed around detached.
 */
class RequestLog implements Logger {
  private bound: Logger | undefined;
  constructor(
    private readonly parent: Logger,
    private readonly requestId: string,
  ) {}
  private get real(): Logger {
    return (this.bound ??= this.parent.child({ requestId: this.requestId }));
  }
  get debug() {
    return this.real.debug;
  }
  get info() {
    return this.real.info;
  }
  get warn() {
    return this.real.warn;
  }
  get error() {
    return this.real.error;
  }
  get child() {
    return this.real.child;
  }
  get enabled() {
    return this.parent.enabled;
  }
}

export function createEdge(deps: Deps): MiddlewareHandler<AppEnv> {
  const origins = deps.config.CORS_ORIGINS.split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  const anyOrigin = origins.includes("*");
  // Preflights are rare: hono's cors answers them as before.
  const preflight = cors({
    origin: anyOrigin ? "*" : origins,
    allowHeaders: CORS_ALLOW_HEADERS,
    exposeHeaders: CORS_EXPOSE.split(","),
    maxAge: 600,
  });
  // The per-request debug line costs an object, two clock reads and a log call: only when it is written.
  const logRequests = deps.log.enabled("debug");
  const timing = deps.config.SERVER_TIMING;
  const adminToken = deps.config.ADMIN_TOKEN;
  /** Does this request get Server-Timing (SERVER_TIMING)? */
  const timed = (c: Context<AppEnv>): boolean =>
    timing === "all" ||
    (timing === "operators" && isOperator(c.req.raw.headers.get("authorization") ?? undefined, adminToken));

  // `executionCtx` throws when the runtime passed none (app.request in tests).
  const memo = requestDepsMemo(deps);
  const depsFor = (c: Context<AppEnv>): Deps => {
    let ctx: ExecutionContext | undefined;
    try {
      ctx = c.executionCtx;
    } catch {
      ctx = undefined;
    }
    return memo(ctx);
  };

  const finish = (c: Context<AppEnv>, res: Response, requestId: string, corsPath: boolean): void => {
    const h = res.headers;
    h.set("x-request-id", requestId);
    for (const [name, value] of SECURITY_HEADERS) h.set(name, value);
    if (!corsPath) return;
    if (anyOrigin) h.set("access-control-allow-origin", "*");
    else {
      const origin = c.req.raw.headers.get("origin");
      if (origin && origins.includes(origin)) h.set("access-control-allow-origin", origin);
      h.append("vary", "Origin");
    }
    h.set("access-control-expose-headers", CORS_EXPOSE);
  };

  return async function edge(c, next) {
    const requestId = requestIdOf(c.req.raw.headers);
    c.set("requestId", requestId);
    const reqDeps = depsFor(c);
    c.set("deps", reqDeps);
    c.set("log", new RequestLog(deps.log, requestId));
    const path = c.req.path;
    const corsPath = isCorsPath(path);
    const started = logRequests ? performance.now() : 0;
    if (corsPath && c.req.method === "OPTIONS") {
      const res = (await preflight(c, next)) as Response;
      res.headers.set("x-request-id", requestId);
      if (timed(c)) res.headers.set("server-timing", NO_TRIPS);
      for (const [name, value] of SECURITY_HEADERS) res.headers.set(name, value);
      return res;
    }
    // Every dependency call made for this request (its handler's and the isolate's clients') is
    // counted in `trips` (src/util/trips.ts); what is still in flight at the answer is background.
    if (timed(c)) {
      const trips = new RequestTrips();
      await tripScope.run(trips, next);
      c.res.headers.set("server-timing", trips.header());
    } else await next();
    finish(c, c.res, requestId, corsPath);
    // Daily unique visitors: queued in this isolate, sent in one PFADD per interval (http/uv.ts).
    if (corsPath && path.startsWith("/api/")) trackVisit(c, reqDeps);
    // Cache and sale counters reach Redis in the background, at most every few seconds per isolate.
    deps.isolate.caches.metrics.maybeFlush(reqDeps);
    deps.isolate.saleCounters.maybeFlush(reqDeps);
    if (!logRequests) return;
    deps.log.debug("request", {
      requestId,
      method: c.req.method,
      path,
      status: c.res.status,
      ms: Math.round((performance.now() - started) * 100) / 100,
    });
  };
}

/**
 * Answers a GET from a cache module's prepared response: 304 with no body when `If-None-Match`
 * holds its ETag, else the prepared bytes. Synchronous on a fresh L1 hit (no promise at all).
 */
export function servePrepared<K extends string | number, V>(
  c: Context<AppEnv>,
  module: CacheModule<K, V, PreparedResponse>,
  key: K,
  /** Told the value a read that memory could not answer found (CacheModule.serve). */
  onSlowValue?: (value: V | null) => void,
): Response | Promise<Response> {
  // A read neither origin nor cache could answer rejects with CacheUnavailableError: the app's
  // error handler answers it (503, src/app.ts).
  const served = module.serve(c.get("deps"), key, onSlowValue);
  return served instanceof Promise ? served.then((p) => respond(c, p)) : respond(c, served);
}

function respond(c: Context<AppEnv>, p: PreparedResponse): Response {
  const inm = c.req.raw.headers.get("if-none-match");
  // Plain records: on Deno handing a Headers object to Response costs a full re-validating copy.
  if (inm !== null && etagMatches(inm, p.etag)) return new Response(null, { status: 304, headers: { etag: p.etag } });
  return new Response(p.body, { headers: { "content-type": "application/json", etag: p.etag } });
}

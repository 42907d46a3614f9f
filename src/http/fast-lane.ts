/**
 * The fast lane: the few requests a crowd sends most — answered from this isolate's memory alone —
 * are served before Hono routes anything. Everything else (and every miss here) takes the normal
 * path, which gives the same answer; the lane only skips work, never changes a response.
 *
 *   GET  /api/shop/{id}, GET /api/shop-type/list   a fresh L1 hit's prepared response (ETag, 304);
 *                                                   the shop-type list only within the listing
 *                                                   limit (http/listing-limit.ts; over it: normal path, 429)
 *   GET  /api/user/me                               a warm session (deps.isolate.sessions.peek)
 *   POST /api/voucher-order/seckill/{id}            a warm session whose answer is in memory:
 *                                                   sold out (memo), or the order the buyer holds
 *
 * Why (measured, scripts/micro/read-path.bench.ts and bench group shop-read): after the prepared
 * responses and the fused edge middleware, an L1 hit still cost ~6.4 µs over a Hono hello-world
 * in-process, of which ~3.5 µs was routing the full route table and Hono's dispatch and ~2.4 µs
 * setting 16 headers one by one. Here the path is matched by hand, the headers are copied from a
 * template built once per prepared value (1.2 µs for 16 in the same measurement), and the edge's
 * duties are done inline with the same helpers: request id, security headers, CORS, UV, cache
 * counters. tests/http/fast-lane.test.ts pins the lane's responses to the normal path's.
 *
 * Skipped (normal path) when the debug request log is on, so that log stays complete.
 */
import type { ExecutionContext } from "hono";
import type { PreparedResponse } from "../cache/prepared.ts";
import { etagMatches } from "../cache/prepared.ts";
import type { CacheModule } from "../cache/module.ts";
import type { Deps } from "../deps.ts";
import { fail, ok } from "../errors.ts";
import { seckillEnvelope } from "./envelopes.ts";
import { answerFromMemory } from "../services/seckill/reserve.ts";
import type { SessionUser } from "../services/session.ts";
import { NO_TRIPS } from "../util/trips.ts";
import { bearer, isOperator } from "./auth.ts";
import { type ClientEnv, limitAddressOf } from "./client-ip.ts";
import { CORS_EXPOSE, requestDepsMemo, requestIdOf, SECURITY_HEADERS } from "./edge.ts";
import { HeaderTemplate, respondWith } from "./headers.ts";
import { trackVisitOf } from "./uv.ts";

const ID = /^[1-9]\d{0,15}$/;
const SHOP_PREFIX = "/api/shop/";
const SECKILL_PREFIX = "/api/voucher-order/seckill/";

export type FastLane = (req: Request, env: unknown, ctx: ExecutionContext | undefined) => Response | undefined;

export function createFastLane(deps: Deps): FastLane | undefined {
  if (deps.log.enabled("debug")) return undefined;
  const origins = deps.config.CORS_ORIGINS.split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  const anyOrigin = origins.includes("*");
  const caches = deps.isolate.caches;
  // Lane answers come from memory: no trips. "all": in every template; "operators": set per answer.
  const timing = deps.config.SERVER_TIMING;

  /** The headers every lane response carries except x-request-id (and CORS for listed origins). */
  const base = (contentType: boolean): Headers => {
    const h = new Headers();
    if (contentType) h.set("content-type", "application/json");
    for (const [name, value] of SECURITY_HEADERS) h.set(name, value);
    if (anyOrigin) h.set("access-control-allow-origin", "*");
    h.set("access-control-expose-headers", CORS_EXPOSE);
    if (timing === "all") h.set("server-timing", NO_TRIPS);
    return h;
  };
  const jsonTemplate = new HeaderTemplate(base(true));
  /**
   * Per prepared value (so per L1 entry; garbage-collected with it): the full 200 and 304 header
   * sets. A WeakMap keyed by the prepared object, so it can never outgrow the L1s.
   */
  const templates = new WeakMap<PreparedResponse, { ok: HeaderTemplate; notModified: HeaderTemplate }>();
  const templateOf = (p: PreparedResponse) => {
    let t = templates.get(p);
    if (!t) {
      const okHeaders = base(true);
      okHeaders.set("etag", p.etag);
      const notModified = base(false);
      notModified.set("etag", p.etag);
      t = { ok: new HeaderTemplate(okHeaders), notModified: new HeaderTemplate(notModified) };
      templates.set(p, t);
    }
    return t;
  };

  const depsFor = requestDepsMemo(deps);
  const listing = deps.isolate.listingLimit;
  /** Counts a listing request against its address's limit (memory only); true when over it. */
  const overListingLimit = (req: Request, env: unknown, reqDeps: Deps): boolean => {
    if (!listing) return false;
    const now = reqDeps.clock.now();
    const waitMs = listing.check(limitAddressOf(req.headers, env as ClientEnv | undefined, deps.config), now);
    listing.maybeSync(reqDeps, now);
    return waitMs > 0;
  };

  const finish = (
    req: Request,
    template: HeaderTemplate,
    body: BodyInit | null,
    status: number,
    reqDeps: Deps,
    env: unknown,
    user: SessionUser | null,
    requestId = requestIdOf(req.headers),
    more?: (h: Headers) => void,
  ): Response => {
    const res = respondWith(deps.runtime, template, body, status, (headers) => {
      headers.set("x-request-id", requestId);
      if (!anyOrigin) {
        const origin = req.headers.get("origin");
        if (origin && origins.includes(origin)) headers.set("access-control-allow-origin", origin);
        headers.append("vary", "Origin");
      }
      more?.(headers);
      if (timing === "operators" && isOperator(req.headers.get("authorization") ?? undefined, deps.config.ADMIN_TOKEN))
        headers.set("server-timing", NO_TRIPS);
    });
    trackVisitOf(reqDeps, user, req.headers, env as ClientEnv | undefined);
    caches.metrics.maybeFlush(reqDeps);
    deps.isolate.saleCounters.maybeFlush(reqDeps);
    return res;
  };

  const servePrepared = <K extends string | number>(
    req: Request,
    module: CacheModule<K, unknown, PreparedResponse>,
    key: K,
    env: unknown,
    ctx: ExecutionContext | undefined,
    limited = false,
  ) => {
    const p = module.peekFresh(key);
    if (!p) return undefined;
    const reqDeps = depsFor(ctx);
    // Over the limit: the normal path answers the 429 (and counts nothing more).
    if (limited && overListingLimit(req, env, reqDeps)) return undefined;
    const t = templateOf(p);
    const inm = req.headers.get("if-none-match");
    deps.isolate.fastLane.prepared++;
    if (inm !== null && etagMatches(inm, p.etag)) return finish(req, t.notModified, null, 304, reqDeps, env, null);
    return finish(req, t.ok, p.body, 200, reqDeps, env, null);
  };

  const warmUser = (req: Request, reqDeps: Deps): SessionUser | undefined => {
    const token = bearer(req.headers.get("authorization") ?? undefined);
    return token ? reqDeps.isolate.sessions.peek(reqDeps, token) : undefined;
  };

  return (req, env, ctx) => {
    const url = req.url;
    // The path: from the first "/" after "scheme://host"; a query string sends it the normal way.
    const start = url.indexOf("/", url.indexOf("//") + 2);
    if (start < 0 || url.indexOf("?", start) >= 0) return undefined;
    const path = url.slice(start);
    const method = req.method;
    if (method === "GET") {
      if (path.startsWith(SHOP_PREFIX)) {
        const id = path.slice(SHOP_PREFIX.length);
        if (!ID.test(id) || Number(id) > Number.MAX_SAFE_INTEGER) return undefined;
        return servePrepared(req, caches.shop as CacheModule<number, unknown, PreparedResponse>, Number(id), env, ctx);
      }
      if (path === "/api/shop-type/list")
        return servePrepared(
          req,
          caches.shopTypes as CacheModule<string, unknown, PreparedResponse>,
          "all",
          env,
          ctx,
          true,
        );
      if (path === "/api/user/me") {
        const reqDeps = depsFor(ctx);
        const user = warmUser(req, reqDeps);
        if (!user) return undefined;
        deps.isolate.fastLane.me++;
        return finish(req, jsonTemplate, JSON.stringify(ok(user)), 200, reqDeps, env, user);
      }
      return undefined;
    }
    if (method === "POST" && path.startsWith(SECKILL_PREFIX)) {
      const id = path.slice(SECKILL_PREFIX.length);
      if (!ID.test(id) || Number(id) > Number.MAX_SAFE_INTEGER) return undefined;
      // Only bodiless attempts (the classic client's): one with a body takes the routed way, whose
      // body middleware checks its type and size (a 415 or 413 there, never a memory answer here).
      const length = req.headers.get("content-length");
      if (req.body !== null && length !== "0") return undefined;
      const reqDeps = depsFor(ctx);
      const user = warmUser(req, reqDeps);
      if (!user) return undefined;
      const res = answerFromMemory(reqDeps, Number(id), user.id, () =>
        limitAddressOf(req.headers, env as ClientEnv | undefined, deps.config),
      );
      if (!res) return undefined;
      deps.isolate.fastLane.seckill++;
      deps.isolate.saleCounters.count(Number(id), res.ok ? "ok" : res.reason);
      if (!res.ok && res.reason === "RATE_LIMITED") {
        // A caller Redis rate-limited, or a voucher whose admission budget for this second is
        // spent: the same 429 the route's error handler sends (envelope with the request id,
        // Retry-After in whole seconds), with no Redis call.
        const requestId = requestIdOf(req.headers);
        const retryAfter = String(Math.max(1, Math.ceil(res.retryAfterMs / 1000)));
        return finish(
          req,
          jsonTemplate,
          JSON.stringify(fail("RATE_LIMITED", res.message, requestId)),
          429,
          reqDeps,
          env,
          user,
          requestId,
          (h) => h.set("retry-after", retryAfter),
        );
      }
      return finish(req, jsonTemplate, JSON.stringify(seckillEnvelope(res)), 200, reqDeps, env, user);
    }
    return undefined;
  };
}

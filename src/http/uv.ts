/**
 * UV tracking: feeds the day's HyperLogLog (src/services/uv.ts) from /api/* responses through this
 * isolate's batcher (`deps.isolate.uv`), which sends one PFADD per interval, off the response path.
 * Called by the edge middleware (src/http/edge.ts) after the handler ran; it is not a middleware of
 * its own, and it keeps no state: everything it remembers lives on `deps.isolate.uv`.
 *
 * The visitor is the user id when the route resolved a session (requireUser / optionalUser ran),
 * otherwise its address (the per-address limit key: an IPv6 /64 is one visitor; the user agent is
 * not part of it, a client can rotate that freely) — we never resolve a token just for counting.
 */
import type { Context } from "hono";
import type { Deps } from "../deps.ts";
import type { SessionUser } from "../services/session.ts";
import type { AppEnv } from "../types.ts";
import { hash53 } from "../util/hash.ts";
import { type ClientEnv, limitAddressOf } from "./client-ip.ts";

/** Counts the request's visitor for today (queued; flushed in the background when due). */
export function trackVisit(c: Context<AppEnv>, deps: Deps): void {
  // `c.get`, not `c.var`: the latter copies every variable into a fresh object on each access.
  const user = (c as unknown as Context<{ Variables: { user?: SessionUser | null } }>).get("user");
  trackVisitOf(deps, user ?? null, c.req.raw.headers, c.env as ClientEnv | undefined);
}

/** The same from the raw parts (the fast lane answers before Hono builds a Context). */
export function trackVisitOf(deps: Deps, user: SessionUser | null, headers: Headers, env: ClientEnv | undefined): void {
  const uv = deps.isolate.uv;
  const day = uv.dayOf(deps.clock.now(), deps.config.SERVICE_TIME_ZONE);
  if (user) {
    // User ids and address hashes live in one seen set: a user's key is negative, an address's positive.
    uv.add(deps, day, -user.id, { userId: user.id });
  } else {
    const address = limitAddressOf(headers, env, deps.config);
    uv.add(deps, day, hash53(address) + 1, { address });
  }
  uv.maybeFlush(deps);
}

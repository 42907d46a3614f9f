/**
 * UV middleware: feeds the day's HyperLogLog (src/services/uv.ts) from /api/* requests, off the
 * response path (deps.waitUntil), so it adds no latency.
 *
 * The visitor is the user id when the route resolved a session (requireUser / optionalUser ran),
 * otherwise address + user agent — we never resolve a token just for counting. A bounded LRU of
 * visitor-days already added, per app instance (i.e. per isolate), keeps a busy visitor from
 * costing a PFADD per request: at most one per visitor per day per isolate (PFADD is idempotent,
 * so isolates repeating it is harmless). A failed PFADD forgets the entry so a later request retries.
 */
import { createMiddleware } from "hono/factory";
import { LRUCache } from "lru-cache";
import { recordVisit, isoDay, visitorId, type Visitor } from "../services/uv.ts";
import type { SessionUser } from "../services/session.ts";
import type { AppEnv } from "../types.ts";
import { clientIp } from "./client-ip.ts";

/**
 * 53-bit FNV-style hash (cyrb53) of the in-memory "seen" key: keeps each LRU entry small whatever
 * the user agent's length. A collision only skips one redundant-looking PFADD (a negligible undercount).
 */
function hash53(s: string): number {
  let h1 = 0xdeadbeef;
  let h2 = 0x41c6ce57;
  for (let i = 0; i < s.length; i++) {
    const ch = s.charCodeAt(i);
    h1 = Math.imul(h1 ^ ch, 2654435761);
    h2 = Math.imul(h2 ^ ch, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}

export interface UvTrackerOptions {
  /** Visitor-days remembered per isolate (entries). */
  maxSeen?: number;
}

/**
 * The service-zone day of an instant, remembered for the current UTC minute: zone offsets are whole
 * minutes (transitions fall on :00/:15/:30/:45), so every instant of one UTC minute has the same
 * local day, and a busy isolate formats a date about once a minute instead of once per request.
 */
function dayMemo(): (ms: number, zone: string) => string {
  let minute = Number.NaN;
  let memoZone = "";
  let day = "";
  return (ms, zone) => {
    const m = Math.floor(ms / 60_000);
    if (m !== minute || zone !== memoZone) {
      day = isoDay(ms, zone);
      minute = m;
      memoZone = zone;
    }
    return day;
  };
}

/**
 * Mount it on `/api/*` (app.ts) so other paths skip it entirely; it still checks the path itself,
 * since Hono's `/api/*` also matches `/api`.
 */
export function uvTracker(opts: UvTrackerOptions = {}) {
  const seen = new LRUCache<string, true>({ max: opts.maxSeen ?? 50_000 });
  const dayOf = dayMemo();
  return createMiddleware<AppEnv & { Variables: { user?: SessionUser | null } }>(async (c, next) => {
    await next();
    if (c.req.method === "OPTIONS" || !c.req.path.startsWith("/api/")) return;
    const deps = c.get("deps");
    // `c.get`, not `c.var`: the latter copies every variable into a fresh object on each access.
    const user = c.get("user");
    const visitor: Visitor = user ? { userId: user.id } : { ip: clientIp(c, deps.config.TRUST_PROXY), userAgent: (c.req.header("user-agent") ?? "").slice(0, 512) };
    const day = dayOf(deps.clock.now(), deps.config.SERVICE_TIME_ZONE);
    const seenKey = `${day}|${"userId" in visitor ? `u${visitor.userId}` : `a${hash53(`${visitor.ip}\n${visitor.userAgent}`)}`}`;
    if (seen.has(seenKey)) return;
    seen.set(seenKey, true);
    deps.waitUntil(
      (async () => {
        try {
          await recordVisit(deps, day, await visitorId(visitor));
        } catch (err) {
          seen.delete(seenKey);
          throw err;
        }
      })(),
    );
  });
}

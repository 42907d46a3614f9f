/**
 * Bench server of group "shop-read": the real app — createApp(createDeps(parseEnv(…))) — served by
 * Bun.serve the way src/entry/bun.ts serves it (same fetch signature, same ExecutionContext shim
 * with a pending-promise set behind `waitUntil`), against the bench stack. MODE decides where a
 * shop read is answered from:
 *
 *   l1     default caches: GET /api/shop/{id} from the in-process L1 once warm (no Redis call);
 *   l2     shop cache with l1TtlMs 0 and no stale window: GET /api/shop/{id} reads Redis on every request, through
 *          @upstash/redis → Upstash-REST stand-in → redis-server (single-flight and
 *          auto-pipelining still apply, as in production);
 *   stale  shop cache with l1TtlMs 0 and its default stale window: every value is past its L1
 *          freshness and answered from memory while one background refresh per key reads Redis;
 *   miss   default caches and MISS_PER_ADDRESS from MISS_PER_ADDRESS (0 = the meter off): the
 *          shop-miss rows request ids no shop has, so every request is a lookup of an unknown id;
 *   mysql  GET /bench/shop-origin/{id}: the same handler with `loadShop` instead of the cache, so
 *          every request is one MySQL query through @planetscale/database → PlanetScale-HTTP
 *          stand-in → MariaDB.
 *
 * /bench/shop-origin/:id is registered on the app returned by createApp (src/ is untouched), so
 * it runs behind the same middleware stack as /api/shop/:id (request id, deps, secure headers,
 * CORS, body limit). It is registered in every mode so the three servers' routers are identical.
 *
 * Env: PORT, MODE, BENCH_STACK_ENV (JSON of the stack's settings). The app's config is built from
 * BENCH_STACK_ENV alone, not from the runner's environment, so a developer's shell cannot change it.
 * IPC: the parent sends {type:"served"}; the child answers {type:"served", served} (requests
 * received since start — the denominator of the "trips per request" columns).
 */
import { createApp } from "../../../src/app.ts";
import { createCaches } from "../../../src/caches.ts";
import { createDeps } from "../../../src/deps.ts";
import { parseEnv } from "../../../src/env.ts";
import { fail, ok } from "../../../src/errors.ts";
import { IdParam, v } from "../../../src/http/validate.ts";
import { loadShop } from "../../../src/services/shops.ts";

const MODES = ["l1", "l2", "stale", "mysql", "miss"] as const;
const mode = process.env.MODE as (typeof MODES)[number];
if (!MODES.includes(mode)) throw new Error(`MODE must be one of ${MODES.join(", ")}, got ${String(process.env.MODE)}`);
const stackEnv = JSON.parse(process.env.BENCH_STACK_ENV ?? "null") as Record<string, string> | null;
if (!stackEnv) throw new Error("BENCH_STACK_ENV is required");

const missMeter =
  mode === "miss" && process.env.MISS_PER_ADDRESS !== undefined
    ? { MISS_PER_ADDRESS: process.env.MISS_PER_ADDRESS }
    : {};
const config = parseEnv({ ...stackEnv, LOG_LEVEL: "silent", RUN_CRON: "false", PORT: process.env.PORT, ...missMeter });

const pending = new Set<Promise<unknown>>();
const track = (p: Promise<unknown>) => {
  const settled = p
    .catch((err: unknown) => deps.log.error("background task failed", { err }))
    .finally(() => pending.delete(settled));
  pending.add(settled);
};
const deps = createDeps(config, { waitUntil: track });
if (mode === "l2")
  deps.isolate.caches = createCaches(
    { shop: { l1TtlMs: 0, l1StaleMs: 0 } },
    { degraded: () => deps.isolate.resilience.redis.degraded },
  );
if (mode === "stale")
  deps.isolate.caches = createCaches(
    { shop: { l1TtlMs: 0 } },
    { degraded: () => deps.isolate.resilience.redis.degraded },
  );
const app = createApp(deps);
app.get("/bench/shop-origin/:id", v("param", IdParam), async (c) => {
  const found = await loadShop(c.get("deps"), c.req.valid("param").id);
  return c.json(found ? ok(found) : fail("NOT_FOUND", "shop not found"));
});
const ctx = { waitUntil: track, passThroughOnException() {}, props: {} };

let served = 0;
const server = Bun.serve({
  port: config.PORT,
  hostname: "127.0.0.1",
  fetch: (req, srv) => {
    served++;
    return app.fetch(req, { clientIp: srv.requestIP(req)?.address }, ctx);
  },
});
console.log(`app-shop (${mode}) listening on ${server.url.href}`);

process.on("message", (m: unknown) => {
  if ((m as { type?: unknown } | null)?.type === "served") process.send?.({ type: "served", served });
});
process.on("SIGTERM", () => {
  void (async () => {
    await server.stop(true);
    await Promise.race([Promise.allSettled([...pending]), new Promise((r) => setTimeout(r, 1000))]);
    process.exit(0);
  })();
});

/**
 * Bun entry (dev, tests, self-hosting): parse env once, build deps and app once, serve.
 * `waitUntil` is shimmed with a set of pending promises so SIGTERM drains background work.
 */
import { createApp } from "../app.ts";
import { createDeps } from "../deps.ts";
import { type Config, ConfigError, parseEnv } from "../env.ts";
import type { ClientEnv } from "../http/client-ip.ts";
import { cronJobs, runCron } from "../jobs/index.ts";
import { checkEvictionAll, EvictingRedisError } from "../redis/eviction.ts";
import { runtimes } from "../runtime.ts";

let config: Config;
try {
  config = parseEnv(process.env);
} catch (err) {
  console.error(err instanceof ConfigError ? err.message : err);
  process.exit(1);
}

const pending = new Set<Promise<unknown>>();
const track = (p: Promise<unknown>) => {
  const settled = p
    .catch((err: unknown) => deps.log.error("background task failed", { err }))
    .finally(() => pending.delete(settled));
  pending.add(settled);
};
const deps = createDeps(config, { waitUntil: track, runtime: runtimes.bun });
// An evicting database may drop acknowledged orders: refuse to serve on one (src/redis/eviction.ts).
try {
  await checkEvictionAll(deps);
} catch (err) {
  if (!(err instanceof EvictingRedisError)) throw err;
  console.error(err.message);
  process.exit(1);
}
const app = createApp(deps);
const ctx = { waitUntil: track, passThroughOnException() {}, props: {} };

const server = Bun.serve({
  port: config.PORT,
  hostname: process.env.HOST ?? "127.0.0.1",
  // The socket's peer: request headers never name the client on Bun (src/http/client-ip.ts).
  fetch: (req, srv) => app.fetch(req, { clientIp: srv.requestIP(req)?.address } satisfies ClientEnv, ctx),
});
deps.log.info("listening", { url: server.url.href });

if (config.RUN_CRON) {
  for (const cron of new Set(cronJobs.map((j) => j.cron))) {
    Bun.cron(cron, () => runCron(deps, cron, Date.now()));
  }
}

let stopping = false;
async function shutdown(signal: string) {
  if (stopping) return;
  stopping = true;
  deps.log.info("shutting down", { signal, pending: pending.size });
  await server.stop();
  await Promise.race([Promise.allSettled([...pending]), new Promise((r) => setTimeout(r, 5000))]);
  process.exit(0);
}
process.on("SIGTERM", () => void shutdown("SIGTERM"));
process.on("SIGINT", () => void shutdown("SIGINT"));

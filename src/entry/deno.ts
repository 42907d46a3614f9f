/**
 * Deno entry: `deno run -A src/entry/deno.ts`. Same app, `Deno.serve`, `Deno.cron` when available.
 */
import { createApp } from "../app.ts";
import { createDeps } from "../deps.ts";
import { type Config, ConfigError, parseEnv } from "../env.ts";
import type { ClientEnv } from "../http/client-ip.ts";
import { cronJobs, runCron } from "../jobs/index.ts";
import { checkEvictionAll, EvictingRedisError } from "../redis/eviction.ts";
import { runtimes } from "../runtime.ts";

declare const Deno: {
  env: { toObject(): Record<string, string> };
  exit(code: number): never;
  serve(
    opts: { port: number; hostname: string; onListen?: (a: { port: number; hostname: string }) => void },
    handler: (req: Request, info: { remoteAddr: { hostname: string } }) => Response | Promise<Response>,
  ): unknown;
  cron?: (name: string, schedule: string, fn: () => Promise<unknown>) => unknown;
};

let config: Config;
try {
  config = parseEnv(Deno.env.toObject());
} catch (err) {
  console.error(err instanceof ConfigError ? err.message : err);
  Deno.exit(1);
}

const deps = createDeps(config, { runtime: runtimes.deno });
// An evicting database may drop acknowledged orders: refuse to serve on one (src/redis/eviction.ts).
try {
  await checkEvictionAll(deps);
} catch (err) {
  if (!(err instanceof EvictingRedisError)) throw err;
  console.error(err.message);
  Deno.exit(1);
}
const app = createApp(deps);
const ctx = { waitUntil: deps.waitUntil, passThroughOnException() {}, props: {} };
const hostname = Deno.env.toObject().HOST ?? "127.0.0.1";

Deno.serve(
  {
    port: config.PORT,
    hostname,
    onListen: ({ port }) => deps.log.info("listening", { url: `http://${hostname}:${port}/` }),
  },
  // The socket's peer: request headers never name the client on Deno (src/http/client-ip.ts).
  (req, info) => app.fetch(req, { clientIp: info.remoteAddr.hostname } satisfies ClientEnv, ctx),
);

if (config.RUN_CRON && Deno.cron) {
  for (const cron of new Set(cronJobs.map((j) => j.cron))) {
    Deno.cron(`cityhub ${cron}`, cron, () => runCron(deps, cron, Date.now()));
  }
}

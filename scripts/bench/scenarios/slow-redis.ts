/**
 * Group "slow-redis" (issue 11): does a slow Redis leak into reads served from L1?
 *
 *   slow-redis-quiet (baseline)  GET /api/shop/{id} from L1 on the app (servers/app-shop.ts, MODE
 *                                l1) with Redis as usual.
 *   slow-redis-l1                the same read on a second app server whose Redis sits behind a
 *                                fault proxy (scripts/stack/fault-proxy.ts) adding 300 ms to every
 *                                request — above the default REDIS_TIMEOUT_MS (250), so its
 *                                background work (cache metrics, UV, session upkeep) and every L1
 *                                expiry's L2 read time out, its Redis breaker opens, and misses fall
 *                                through to MySQL. Each round measures the quiet server and then the
 *                                slow one, back to back: "quiet p99 ms" and "p99 ÷ quiet" compare the
 *                                slow server's p99 with the quiet one's of the same round (target ≤ 2).
 *
 * Both servers share the shop-read stack (fixtures/app-stack.ts) and the wrk script rotating over
 * 50 ids. After each round the slow server's Redis breaker (state, timeouts, refused calls, from
 * GET /health) is logged, to show what the app was doing while measured.
 */
import { join } from "node:path";
import { appStack } from "../fixtures/app-stack.ts";
import { ROTATE_IDS_LUA } from "../fixtures/app-stack.ts";
import { uncountedCpu } from "../lib/cpu.ts";
import { spawnBunServer, type BunChild } from "../lib/proc.ts";
import { runWrk } from "../lib/wrk.ts";
import { defineScenario, type BenchContext, type HttpTarget } from "../types.ts";
import { startFaultProxy } from "../../stack/fault-proxy.ts";

const GROUP = "slow-redis";
const APP_SERVER = join(import.meta.dir, "../servers/app-shop.ts");
/** Added to every request of the slow server's Redis, ms. */
const REDIS_DELAY_MS = 300;

/** Every id answers 200 with its shop (concurrently: on the slow server each first read may wait for a timeout). */
async function warm(base: string, ids: readonly number[]): Promise<void> {
  await Promise.all(
    ids.map(async (id) => {
      const res = await fetch(`${base}${id}`, { signal: AbortSignal.timeout(15_000) });
      const body = (await res.json().catch(() => null)) as { success?: unknown; data?: { id?: unknown } } | null;
      if (res.status !== 200 || body?.success !== true || body.data?.id !== id)
        throw new Error(`GET ${base}${id} answered ${res.status} ${JSON.stringify(body).slice(0, 200)}`);
    }),
  );
}

/** The quiet server, started once for both rows. */
function quietServer(ctx: BenchContext): Promise<{ server: BunChild; ids: number[] }> {
  return ctx.shared("slow-redis-quiet-server", async () => {
    const stack = await appStack(ctx);
    const server = await spawnBunServer({
      script: APP_SERVER,
      env: { MODE: "l1", BENCH_STACK_ENV: JSON.stringify(stack.env) },
    });
    try {
      await warm(`${server.url}/api/shop/`, stack.ids);
    } catch (e) {
      await server.stop();
      throw e;
    }
    return { value: { server, ids: stack.ids }, stop: server.stop };
  });
}

const quiet = defineScenario({
  name: "slow-redis-quiet",
  group: GROUP,
  baseline: true,
  description:
    "GET /api/shop/{id} from L1 on the app (servers/app-shop.ts, MODE l1), Redis as usual; 50 ids round robin",
  async setup(ctx) {
    const { server } = await quietServer(ctx);
    return { kind: "http", url: `${server.url}/api/shop/`, luaScript: ROTATE_IDS_LUA, teardown: async () => {} };
  },
});

const slow = defineScenario({
  name: "slow-redis-l1",
  group: GROUP,
  description:
    `GET /api/shop/{id} from L1 on an app whose Redis answers ${REDIS_DELAY_MS} ms late (fault proxy; default REDIS_TIMEOUT_MS 250 → timeouts, breaker open, misses via MySQL); ` +
    'each round measures the quiet server, then this one: rps/p50/p99 = slow, "quiet p99 ms" = the same round\'s quiet window, "p99 ÷ quiet" their ratio (target ≤ 2)',
  async setup(ctx) {
    const stack = await appStack(ctx);
    const { server: quietApp } = await quietServer(ctx);
    const proxy = startFaultProxy(stack.env.UPSTASH_REDIS_REST_URL as string);
    proxy.set({ kind: "delay", ms: REDIS_DELAY_MS });
    let server: BunChild;
    try {
      server = await spawnBunServer({
        script: APP_SERVER,
        env: { MODE: "l1", BENCH_STACK_ENV: JSON.stringify({ ...stack.env, UPSTASH_REDIS_REST_URL: proxy.url }) },
      });
    } catch (e) {
      await proxy.stop();
      throw e;
    }
    const stop = async () => {
      await server.stop();
      await proxy.stop();
    };
    try {
      await warm(`${server.url}/api/shop/`, stack.ids);
    } catch (e) {
      await stop();
      throw e;
    }
    const target = (url: string): HttpTarget => ({
      kind: "http",
      url,
      luaScript: ROTATE_IDS_LUA,
      teardown: async () => {},
    });
    const quietTarget = target(`${quietApp.url}/api/shop/`);
    const slowTarget = target(`${server.url}/api/shop/`);
    const wrkOpts = (durationMs: number) => ({
      durationMs,
      connections: ctx.connections,
      threads: ctx.threads,
      tmpDir: ctx.tmpDir,
    });
    let round = 0;
    return {
      kind: "run",
      async run(opts) {
        const q = await uncountedCpu(() => runWrk(quietTarget, wrkOpts(opts.durationMs)));
        const s = await runWrk(slowTarget, wrkOpts(opts.durationMs));
        const health = (await (
          await fetch(`${server.url}/health`, { signal: AbortSignal.timeout(5000) })
        )
          .json()
          .catch(() => null)) as {
          data?: { breakers?: { redis?: { state?: string; timeouts?: number; rejected?: number } } };
        } | null;
        const redis = health?.data?.breakers?.redis;
        if (!opts.warmup) {
          ctx.log(
            `  slow-redis-l1 #${++round}: quiet p99 ${q.p99Ms.toFixed(2)} ms, slow p99 ${s.p99Ms.toFixed(2)} ms (${(s.p99Ms / q.p99Ms).toFixed(2)}×); ` +
              `slow server's Redis breaker ${redis?.state ?? "?"}, ${redis?.timeouts ?? "?"} timeouts, ${redis?.rejected ?? "?"} calls refused so far`,
          );
        }
        return {
          ...s,
          extras: {
            "quiet p99 ms": q.p99Ms,
            "p99 ÷ quiet": s.p99Ms / q.p99Ms,
            "p50 ÷ quiet": s.p50Ms / q.p50Ms,
          },
        };
      },
      teardown: stop,
    };
  },
});

export default [quiet, slow];

/**
 * Group "shop-read": GET /api/shop/{id} on the real app (own bun process, served like
 * src/entry/bun.ts) answered from L1, from L2 and from MySQL, against a Hono hello-world baseline
 * measured in the same rounds. Headline: the ratio of shop-l1 — what a cached shop read costs
 * next to the cheapest Hono response.
 *
 * Every row is loaded by wrk with the same request script (wrk/rotate-ids.lua, 50 ids round
 * robin), the baseline included (its "/?id=N" requests all hit "/"), so wrk's own per-request
 * work is identical across rows. The app rows share one stack (fixtures/app-stack.ts); only one
 * server is loaded at a time, so the stand-ins' request counters, taken around each round and
 * divided by the requests the server received, say what each row really did:
 * "REST trips/req" (Upstash-REST requests, i.e. Redis round trips; auto-pipelining batches
 * concurrent commands into one) and "DB trips/req" (PlanetScale-HTTP requests, i.e. queries).
 */
import { join } from "node:path";
import { appStack, ROTATE_IDS_LUA, type AppStack } from "../fixtures/app-stack.ts";
import { uncountedCpu } from "../lib/cpu.ts";
import { spawnBunServer, type BunChild } from "../lib/proc.ts";
import { assertLoopback, formatInt, sleep, withTimeout } from "../lib/util.ts";
import { execWrk, parseWrkOutput, runWrk } from "../lib/wrk.ts";
import { type BenchContext, defineScenario, type Extras, type Scenario } from "../types.ts";

const GROUP = "shop-read";
const APP_SERVER = join(import.meta.dir, "../servers/app-shop.ts");

async function fetchText(url: string): Promise<{ status: number; text: string }> {
  const res = await fetch(url, { signal: AbortSignal.timeout(5000) });
  return { status: res.status, text: await res.text() };
}

/** Throws unless GET base+id answers 200 with the success envelope of shop `id`, for every id. */
async function checkShops(base: string, ids: readonly number[]): Promise<void> {
  for (const id of ids) {
    const { status, text } = await fetchText(`${base}${id}`);
    let body: { success?: unknown; data?: { id?: unknown } } | null = null;
    try {
      body = JSON.parse(text) as { success?: unknown; data?: { id?: unknown } } | null;
    } catch {
      /* reported below */
    }
    if (status !== 200 || body?.success !== true || body.data?.id !== id) {
      throw new Error(
        `GET ${new URL(base).pathname}${id} answered ${status} ${text.slice(0, 300)} — expected {success:true,data:{id:${id},…}}`,
      );
    }
  }
}

type Mode = "l1" | "l2" | "stale" | "mysql";

const REST = "REST trips/req";
const DB = "DB trips/req";
type Trips = typeof REST | typeof DB;

interface ModeSpec {
  name: string;
  path: string;
  description: string;
  /**
   * The column this row reports (its own tier). The other count is checked each round instead and
   * logged when above 1 % of requests (e.g. L2 reads falling through to MySQL); one column per
   * row keeps the chart's detail line from overflowing.
   */
  column: Trips;
  /** What a sequential pass over warm ids must have cost, checked in setup (fails the scenario if not). */
  expect(d: { rest: number; db: number; n: number }): string | null;
}

const MODES: Record<Mode, ModeSpec> = {
  l1: {
    name: "shop-l1",
    path: "/api/shop/",
    column: REST,
    description:
      "GET /api/shop/{id} on the app (own bun process), 50 ids, warm: served from the in-process L1 (no Redis call)",
    // One REST request is allowed: the cache-metrics flush (every 5 s per isolate) may land in the pass.
    expect: ({ rest, db }) =>
      rest <= 1 && db === 0 ? null : `an L1 pass made ${rest} Redis and ${db} MySQL requests (expected ≤ 1 and 0)`,
  },
  l2: {
    name: "shop-l2",
    path: "/api/shop/",
    column: REST,
    description:
      "GET /api/shop/{id}, shop cache with l1TtlMs 0: every request reads Redis via @upstash/redis → Upstash-REST stand-in → redis-server",
    expect: ({ rest, db, n }) =>
      rest >= n && db === 0
        ? null
        : `an L2 pass of ${n} requests made ${rest} Redis and ${db} MySQL requests (expected ≥ ${n} and 0)`,
  },
  stale: {
    name: "shop-l1-stale",
    path: "/api/shop/",
    column: REST,
    description:
      "GET /api/shop/{id}, shop cache with l1TtlMs 0 and its default stale window: every value is past its L1 freshness, answered from memory while one background refresh per key reads Redis (the same reads as shop-l2 where values past freshness wait for Redis)",
    // A refresh per key may still be in flight from the first pass, so up to n refreshes; never MySQL.
    expect: ({ rest, db, n }) =>
      rest <= n + 1 && db === 0
        ? null
        : `a stale pass of ${n} requests made ${rest} Redis and ${db} MySQL requests (expected ≤ ${n + 1} and 0)`,
  },
  mysql: {
    name: "shop-mysql",
    path: "/bench/shop-origin/",
    column: DB,
    description:
      "GET /bench/shop-origin/{id} (same middleware, loadShop instead of the cache): one query per request via @planetscale/database → PlanetScale-HTTP stand-in → MariaDB",
    expect: ({ rest, db, n }) =>
      db === n && rest <= 1
        ? null
        : `a MySQL pass of ${n} requests made ${db} MySQL and ${rest} Redis requests (expected ${n} and ≤ 1)`,
  },
};

/** The app server's request counter over IPC; replies are matched FIFO (one question at a time). */
function servedCounter(): { ipc: (m: unknown) => void; ask(server: BunChild): Promise<number> } {
  const waiting: Array<(n: number) => void> = [];
  return {
    ipc: (m) => {
      const msg = m as { type?: unknown; served?: unknown } | null;
      if (msg?.type === "served" && typeof msg.served === "number") waiting.shift()?.(msg.served);
    },
    ask: (server) =>
      withTimeout(
        new Promise<number>((resolve) => {
          waiting.push(resolve);
          server.proc.send({ type: "served" });
        }),
        5000,
        "app server request count over IPC",
      ),
  };
}

function appScenario(mode: Mode): Scenario {
  const spec = MODES[mode];
  return defineScenario({
    name: spec.name,
    group: GROUP,
    description: spec.description,
    async setup(ctx) {
      const stack: AppStack = await appStack(ctx);
      const counter = servedCounter();
      const server = await spawnBunServer({
        script: APP_SERVER,
        env: { MODE: mode, BENCH_STACK_ENV: JSON.stringify(stack.env) },
        ipc: counter.ipc,
      });
      const base = `${server.url}${spec.path}`;
      try {
        // First pass: every id answers with its shop (and L1/L2 are filled where the mode uses them).
        await checkShops(base, stack.ids);
        // Second pass, warm: prove the mode reads where it claims to before anything is measured.
        const rest0 = stack.restRequests();
        const db0 = stack.dbRequests();
        await checkShops(base, stack.ids);
        const problem = spec.expect({
          rest: stack.restRequests() - rest0,
          db: stack.dbRequests() - db0,
          n: stack.ids.length,
        });
        if (problem) throw new Error(`${spec.name}: ${problem}`);
        // The route must sit behind the app's middleware (request id, headers) like /api/shop.
        const res = await fetch(`${base}${stack.ids[0]}`, { signal: AbortSignal.timeout(5000) });
        await res.arrayBuffer();
        if (!res.headers.get("x-request-id"))
          throw new Error(`${spec.name}: response has no x-request-id: the app middleware did not run`);
      } catch (e) {
        await server.stop();
        throw e;
      }

      let before = { rest: 0, db: 0, served: 0 };
      let round = 0;
      return {
        kind: "http",
        url: base,
        luaScript: ROTATE_IDS_LUA,
        async beforeRound() {
          before = { rest: stack.restRequests(), db: stack.dbRequests(), served: await counter.ask(server) };
        },
        async afterRound(): Promise<Extras> {
          round++;
          const served = (await counter.ask(server)) - before.served;
          if (served <= 0) return {};
          const trips: Record<Trips, number> = {
            [REST]: (stack.restRequests() - before.rest) / served,
            [DB]: (stack.dbRequests() - before.db) / served,
          };
          const other: Trips = spec.column === REST ? DB : REST;
          if (trips[other] > 0.01)
            ctx.log(
              `  ${spec.name} round ${round}: ${other} ${trips[other].toFixed(3)} — not every read came from where this row claims`,
            );
          return { [spec.column]: trips[spec.column] };
        },
        teardown: server.stop,
      };
    },
  });
}

const hello = defineScenario({
  name: "shop-hello",
  group: GROUP,
  baseline: true,
  description:
    "GET /?id={1..50} on a Hono hello-world (servers/hono-hello.ts, own bun process), same wrk script as the app rows",
  async setup() {
    const server = await spawnBunServer({ script: join(import.meta.dir, "../servers/hono-hello.ts") });
    try {
      const { status, text } = await fetchText(`${server.url}/?id=1`);
      if (status !== 200 || text !== "Hello, World!")
        throw new Error(`hono-hello answered ${status} ${text.slice(0, 200)}`);
    } catch (e) {
      await server.stop();
      throw e;
    }
    return { kind: "http", url: `${server.url}/?id=`, luaScript: ROTATE_IDS_LUA, teardown: server.stop };
  },
});

// -------------------------------------------------------------------------------- hostile bodies

/** Hostile connections beside the L1 read load (wrk/hostile-bodies.lua). */
const HOSTILE_CONNECTIONS = 50;
const HOSTILE_LUA = join(import.meta.dir, "../wrk/hostile-bodies.lua");
/** Which hostile bodies (wrk/hostile-bodies.lua KINDS): all by default; BENCH_HOSTILE_KINDS=cl|chunked|small to isolate one. */
const HOSTILE_KINDS = process.env.BENCH_HOSTILE_KINDS ?? "all";

/**
 * One round of a "read beside an attack" row: the L1 read alone (quiet), then again while `attack`
 * runs (it starts first and runs one second longer, so the whole read window is under attack).
 */
async function quietThenAttacked(
  ctx: BenchContext,
  base: string,
  durationMs: number,
  attack: (seconds: number) => Promise<string>,
) {
  const read = { kind: "http" as const, url: base, luaScript: ROTATE_IDS_LUA, teardown: async () => {} };
  const wrkOpts = { durationMs, connections: ctx.connections, threads: ctx.threads, tmpDir: ctx.tmpDir };
  const quiet = await uncountedCpu(() => runWrk(read, wrkOpts));
  const seconds = Math.max(1, Math.round(durationMs / 1000));
  const attacking = attack(seconds);
  await sleep(300);
  const loaded = await runWrk(read, wrkOpts);
  return { quiet, loaded, h: parseWrkOutput(await attacking) };
}

/**
 * shop-l1-hostile: per round, the L1 read alone (quiet, --connections wrk connections), then the
 * same read again while a second wrk sends hostile bodies to POST /api/user/login on the same
 * server. Reported rps/p50/p99 are the read's under attack; "quiet p50 ms" and "p50 ÷ quiet"
 * compare it with the quiet window of the same round (issue 9: within 2×). The quiet window's CPU
 * is left out of "CPU µs/op", which is the server's CPU (hostile side included) per read.
 */
const hostile = defineScenario({
  name: "shop-l1-hostile",
  group: GROUP,
  description:
    `GET /api/shop/{id} from L1 (as shop-l1) while ${HOSTILE_CONNECTIONS} other wrk connections send POST /api/user/login bodies round robin: 1 MiB of nested [[[[…]]]] with Content-Length, ` +
    "the same 1 MiB chunked without Content-Length, and 1,000 bytes of [[[[…]]]]; each round measures the read quiet, then under attack; rps/p50/p99 = under attack, " +
    '"quiet p50 ms" = the same round\'s quiet window, "p50 ÷ quiet" their ratio (target ≤ 2), "hostile req/s" = hostile requests answered per second (413/400 or closed connections)',
  async setup(ctx) {
    const stack: AppStack = await appStack(ctx);
    const server = await spawnBunServer({
      script: APP_SERVER,
      env: { MODE: "l1", BENCH_STACK_ENV: JSON.stringify(stack.env) },
    });
    const base = `${server.url}/api/shop/`;
    const login = `${server.url}/api/user/login`;
    try {
      await checkShops(base, stack.ids);
      // The hostile bodies are refused: 1 MiB by the login route's byte limit, the small one by the nesting bound.
      for (const [what, body] of [
        ["1 MiB", "[".repeat(524_288) + "]".repeat(524_288)],
        ["1,000 bytes", "[".repeat(500) + "]".repeat(500)],
      ] as const) {
        const res = await fetch(login, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body,
          signal: AbortSignal.timeout(5000),
        });
        const text = await res.text();
        if (res.status < 400 || res.status >= 500)
          throw new Error(
            `POST /api/user/login with ${what} of nested arrays answered ${res.status} ${text.slice(0, 200)}, expected a 4xx`,
          );
      }
    } catch (e) {
      await server.stop();
      throw e;
    }
    let round = 0;
    return {
      kind: "run",
      async run(opts) {
        assertLoopback(login);
        const { quiet, loaded, h } = await quietThenAttacked(ctx, base, opts.durationMs, (seconds) =>
          execWrk(
            [
              `-t${ctx.threads}`,
              `-c${HOSTILE_CONNECTIONS}`,
              `-d${seconds + 1}s`,
              "--latency",
              "--timeout",
              "5s",
              "-s",
              HOSTILE_LUA,
              login,
              "--",
              HOSTILE_KINDS,
            ],
            seconds + 1,
          ),
        );
        if (!opts.warmup) {
          ctx.log(
            `  shop-l1-hostile #${++round}: quiet ${formatInt(quiet.rps)} req/s p50 ${quiet.p50Ms.toFixed(2)} ms; under attack ${formatInt(loaded.rps)} req/s p50 ${loaded.p50Ms.toFixed(2)} ms ` +
              `p99 ${loaded.p99Ms.toFixed(2)} ms; hostile side ${formatInt(h.requests)} answers (${formatInt(h.errors)} non-2xx or socket errors) in ${h.durationS.toFixed(1)} s`,
          );
        }
        return {
          ...loaded,
          extras: {
            "quiet p50 ms": quiet.p50Ms,
            "p50 ÷ quiet": loaded.p50Ms / quiet.p50Ms,
            "rps ÷ quiet": loaded.rps / quiet.rps,
            "hostile req/s": h.rps,
          },
        };
      },
      teardown: server.stop,
    };
  },
});

// ------------------------------------------------------------------- form and multipart floods

const FLOOD_LUA = join(import.meta.dir, "../wrk/flood-bodies.lua");
/** Flooding connections (issue 16 item 1: "20 clients posting 1 MB forms or 78k-part multiparts"). */
const FLOOD_CONNECTIONS = 20;
/** Which floods (wrk/flood-bodies.lua KINDS): all by default; BENCH_FLOOD_KINDS=form|multipart to isolate one. */
const FLOOD_KINDS = process.env.BENCH_FLOOD_KINDS ?? "all";

/**
 * shop-l1-flood (issue 16 item 1): the L1 read quiet, then while 20 connections post 1 MB forms of
 * 110,000 pairs to the console's sign-in and 78,000-part multiparts to the upload route as a
 * signed-in user. Target: p50 under flood ≤ max(3 × quiet, quiet + 10 ms), 0 reads answered 5xx,
 * no breaker opened (the round fails if the Redis breaker is not closed afterwards).
 */
const flood = defineScenario({
  name: "shop-l1-flood",
  group: GROUP,
  description:
    `GET /api/shop/{id} from L1 (as shop-l1) while ${FLOOD_CONNECTIONS} other wrk connections post, round robin, a 1 MB url-encoded form of 110,000 pairs to POST /console/login and a 78,000-part multipart to POST /api/upload/blog (signed in); ` +
    'rps/p50/p99 = under flood; "quiet p50 ms" = the same round\'s quiet window; "p50 ÷ quiet" and "p50 − quiet ms" against the target ≤ max(3 × quiet, quiet + 10 ms); "flood req/s" = flood requests answered per second (413/401)',
  async setup(ctx) {
    const stack: AppStack = await appStack(ctx);
    const server = await spawnBunServer({
      script: APP_SERVER,
      env: { MODE: "l1", BENCH_STACK_ENV: JSON.stringify(stack.env) },
    });
    const base = `${server.url}/api/shop/`;
    let token: string;
    try {
      await checkShops(base, stack.ids);
      const { Redis } = await import("@upstash/redis");
      const { createSession, SessionKeys } = await import("../../../src/services/session.ts");
      const redis = new Redis({
        url: stack.env.UPSTASH_REDIS_REST_URL as string,
        token: stack.env.UPSTASH_REDIS_REST_TOKEN as string,
        enableTelemetry: false,
      });
      token = await createSession(
        redis,
        { id: 8_800_001, nickName: "flooder", icon: "" },
        3600,
        new SessionKeys(stack.env.SESSION_SECRET as string),
      );
    } catch (e) {
      await server.stop();
      throw e;
    }
    let round = 0;
    return {
      kind: "run",
      async run(opts) {
        assertLoopback(server.url);
        const { quiet, loaded, h } = await quietThenAttacked(ctx, base, opts.durationMs, (seconds) =>
          execWrk(
            [
              `-t${ctx.threads}`,
              `-c${FLOOD_CONNECTIONS}`,
              `-d${seconds + 1}s`,
              "--latency",
              "--timeout",
              "5s",
              "-s",
              FLOOD_LUA,
              `${server.url}/`,
              "--",
              token,
              FLOOD_KINDS,
            ],
            seconds + 1,
          ),
        );
        // Breaker openings so far on the server (the operator's /health): the target is none.
        const health = (await (
          await fetch(`${server.url}/health`, {
            headers: { authorization: `Bearer ${stack.env.ADMIN_TOKEN}` },
            signal: AbortSignal.timeout(5000),
          })
        ).json()) as { data: { breakers: Record<string, { opened: number }> } };
        const openings = Object.values(health.data.breakers).reduce((n, b) => n + b.opened, 0);
        if (!opts.warmup) {
          ctx.log(
            `  shop-l1-flood #${++round}: quiet ${formatInt(quiet.rps)} req/s p50 ${quiet.p50Ms.toFixed(2)} ms; under flood ${formatInt(loaded.rps)} req/s p50 ${loaded.p50Ms.toFixed(2)} ms ` +
              `p99 ${loaded.p99Ms.toFixed(2)} ms; flood side ${formatInt(h.requests)} answers in ${h.durationS.toFixed(1)} s`,
          );
        }
        return {
          ...loaded,
          extras: {
            "quiet p50 ms": quiet.p50Ms,
            "p50 ÷ quiet": loaded.p50Ms / quiet.p50Ms,
            "p50 − quiet ms": loaded.p50Ms - quiet.p50Ms,
            "flood req/s": h.rps,
            "breaker openings": openings,
          },
        };
      },
      teardown: server.stop,
    };
  },
});

// --------------------------------------------------------------------------- one account's uploads

const UPLOAD_LUA = join(import.meta.dir, "../wrk/upload-images.lua");
/** Upload connections beside the read: one account posting ordinary images, 50 in flight. */
const UPLOAD_CONNECTIONS = 50;
/** The image each upload carries, bytes: the default UPLOAD_MAX_BYTES (5 MiB). */
const UPLOAD_IMAGE_BYTES = 5 * 1_048_576;

/** `statuses: 200=N,429=N,…` (wrk/upload-images.lua) → { 200: N, … }. */
function statusCounts(out: string): Record<string, number> {
  const line = /^statuses: (.*)$/m.exec(out)?.[1] ?? "";
  const counts: Record<string, number> = {};
  for (const pair of line.split(",").filter(Boolean)) {
    const [status = "", n = "0"] = pair.split("=");
    counts[status] = Number(n);
  }
  return counts;
}

/**
 * shop-l1-uploads: the L1 read quiet, then while 50 connections post ordinary 5 MiB PNG uploads
 * (valid multipart, one signed-in account) to POST /api/upload/blog with the app's defaults
 * (bucket 5 then 1 per 10 s, 50 MiB a day, UPLOAD_CONCURRENCY 8): nearly every upload is refused
 * (429 by the bucket or the quota, 503 beyond the in-flight bound), before its body is read.
 * After each round the operator's /health says whether any breaker opened (target: none).
 */
const uploads = defineScenario({
  name: "shop-l1-uploads",
  group: GROUP,
  description:
    `GET /api/shop/{id} from L1 (as shop-l1) while ${UPLOAD_CONNECTIONS} other wrk connections post ordinary ${UPLOAD_IMAGE_BYTES / 1_048_576} MiB PNG uploads (valid multipart) to POST /api/upload/blog as one signed-in account, app defaults; ` +
    'rps/p50/p99 = the read under uploads; "quiet p50 ms" = the same round\'s quiet window; "p50 ÷ quiet", "p50 − quiet ms"; "upload req/s" and "upload p50 ms" = the upload side\'s answers; "uploads 200/429/503" = its answers by status over the round; "breaker openings" = openings since the server started, "breakers not closed" = after the round (operator /health; target 0 and 0)',
  async setup(ctx) {
    const stack: AppStack = await appStack(ctx);
    // The uploads that pass are stored in the bench's temporary folder, not the developer's .local.
    const env = { ...stack.env, UPLOAD_DIR: join(ctx.tmpDir, "uploads") };
    const server = await spawnBunServer({
      script: APP_SERVER,
      env: { MODE: "l1", BENCH_STACK_ENV: JSON.stringify(env) },
    });
    const base = `${server.url}/api/shop/`;
    let token: string;
    try {
      await checkShops(base, stack.ids);
      const { Redis } = await import("@upstash/redis");
      const { createSession, SessionKeys } = await import("../../../src/services/session.ts");
      const redis = new Redis({
        url: stack.env.UPSTASH_REDIS_REST_URL as string,
        token: stack.env.UPSTASH_REDIS_REST_TOKEN as string,
        enableTelemetry: false,
      });
      token = await createSession(
        redis,
        { id: 8_800_000 + Math.floor(Math.random() * 100_000), nickName: "uploader", icon: "" },
        3600,
        new SessionKeys(stack.env.SESSION_SECRET as string),
      );
    } catch (e) {
      await server.stop();
      throw e;
    }
    const operator = { authorization: `Bearer ${stack.env.ADMIN_TOKEN}` };
    let round = 0;
    return {
      kind: "run",
      async run(opts) {
        assertLoopback(server.url);
        let out = "";
        const { quiet, loaded, h } = await quietThenAttacked(ctx, base, opts.durationMs, async (seconds) => {
          out = await execWrk(
            [
              `-t${ctx.threads}`,
              `-c${UPLOAD_CONNECTIONS}`,
              `-d${seconds + 1}s`,
              "--latency",
              "--timeout",
              "10s",
              "-s",
              UPLOAD_LUA,
              `${server.url}/api/upload/blog`,
              "--",
              token,
              String(UPLOAD_IMAGE_BYTES),
            ],
            seconds + 1,
          );
          return out;
        });
        const health = (await (
          await fetch(`${server.url}/health`, { headers: operator, signal: AbortSignal.timeout(5000) })
        ).json()) as { data: { breakers: Record<string, { opened: number; state: string }> } };
        const breakers = Object.values(health.data.breakers);
        const openings = breakers.reduce((n, b) => n + b.opened, 0);
        const notClosed = breakers.filter((b) => b.state !== "closed").length;
        const statuses = statusCounts(out);
        if (!opts.warmup) {
          ctx.log(
            `  shop-l1-uploads #${++round}: quiet ${formatInt(quiet.rps)} req/s p50 ${quiet.p50Ms.toFixed(2)} ms; beside uploads ${formatInt(loaded.rps)} req/s p50 ${loaded.p50Ms.toFixed(2)} ms ` +
              `p99 ${loaded.p99Ms.toFixed(2)} ms; uploads ${formatInt(h.requests)} answers in ${h.durationS.toFixed(1)} s (${JSON.stringify(statuses)}), ` +
              `p50 ${h.p50Ms.toFixed(1)} ms; breakers opened ${openings}, not closed ${notClosed}`,
          );
        }
        return {
          ...loaded,
          extras: {
            "quiet p50 ms": quiet.p50Ms,
            "p50 ÷ quiet": loaded.p50Ms / quiet.p50Ms,
            "p50 − quiet ms": loaded.p50Ms - quiet.p50Ms,
            "upload req/s": h.rps,
            "upload p50 ms": h.p50Ms,
            "uploads 200": statuses["200"] ?? 0,
            "uploads 429": statuses["429"] ?? 0,
            "uploads 503": statuses["503"] ?? 0,
            "breaker openings": openings,
            "breakers not closed": notClosed,
          },
        };
      },
      teardown: server.stop,
    };
  },
});

// ------------------------------------------------------------------------------ unknown ids

const UNKNOWN_IDS_LUA = join(import.meta.dir, "../wrk/unknown-ids.lua");
const CMDS = "Redis cmds/miss";

/**
 * shop-miss (issue 16 item 5): GET /api/shop/{id} for ids no shop has, each asked once (so neither
 * L1 nor an L2 null entry answers it), with the per-address miss meter off — what one lookup of an
 * unknown id costs when nothing refuses it. "Redis cmds/miss" counts commands at the Upstash-REST
 * stand-in (a pipeline counts each of its commands), background work included; target ≤ 1.
 */
const miss = defineScenario({
  name: "shop-miss",
  group: GROUP,
  description:
    'GET /api/shop/{id} on the app for ids that do not exist, each once (wrk/unknown-ids.lua), miss meter off (MISS_PER_ADDRESS=0): "Redis cmds/miss" = Redis commands per request at the Upstash-REST stand-in, background work included (target ≤ 1); "DB queries/miss" = PlanetScale queries per request',
  async setup(ctx) {
    const stack: AppStack = await appStack(ctx);
    const counter = servedCounter();
    const server = await spawnBunServer({
      script: APP_SERVER,
      env: { MODE: "miss", MISS_PER_ADDRESS: "0", BENCH_STACK_ENV: JSON.stringify(stack.env) },
      ipc: counter.ipc,
    });
    try {
      const { status, text } = await fetchText(`${server.url}/api/shop/999999999`);
      if (status !== 200 || !text.includes('"NOT_FOUND"'))
        throw new Error(
          `GET /api/shop/999999999 answered ${status} ${text.slice(0, 200)}, expected the NOT_FOUND envelope`,
        );
    } catch (e) {
      await server.stop();
      throw e;
    }
    let before = { cmds: 0, db: 0, served: 0 };
    return {
      kind: "http",
      url: `${server.url}/api/shop/`,
      luaScript: UNKNOWN_IDS_LUA,
      async beforeRound() {
        before = { cmds: stack.restCommands(), db: stack.dbRequests(), served: await counter.ask(server) };
      },
      async afterRound(): Promise<Extras> {
        // Let the round's background work (fills, flushes) land before counting it.
        await sleep(200);
        const served = (await counter.ask(server)) - before.served;
        if (served <= 0) return {};
        return {
          [CMDS]: (stack.restCommands() - before.cmds) / served,
          "DB queries/miss": (stack.dbRequests() - before.db) / served,
        };
      },
      teardown: server.stop,
    };
  },
});

export default [
  hello,
  appScenario("l1"),
  appScenario("l2"),
  appScenario("stale"),
  appScenario("mysql"),
  hostile,
  flood,
  uploads,
  miss,
];

/**
 * Set "runtimes" (issue 15 item 5): the seckill sale phase, the sold-out phase and the L1 shop
 * read on Bun, on workerd (the built Worker bundle) and on Deno, each against a Hono hello-world
 * of the same runtime measured in the same rounds. One group per runtime — runtime-bun,
 * runtime-workerd, runtime-deno — so a runtime's rows are only ever divided by its own hello-world;
 * `--only runtimes` runs all three groups (or `--only runtime-workerd` one of them).
 *
 * Rows of each group (servers: fixtures/runtimes.ts):
 *   <rt>-hello       baseline: GET /?id={1..50} on the runtime's Hono hello-world, --connections
 *                    wrk connections, wrk/rotate-ids.lua — the L1 read's denominator
 *   <rt>-hello-post  POST / on the same hello-world (a server of its own), SWARM (200) wrk
 *                    connections, wrk/seckill-swarm.lua over the 20,000 buyers' tokens — the
 *                    seckill rows' denominator: the same wrk script, connections and timeout
 *   <rt>-sale        the on-sale phase: POST /api/voucher-order/seckill/{id}, the swarm as
 *                    seckill-sale does it (20,000 distinct buyers round robin, a fresh voucher of
 *                    20,000 units per round), but wrk is stopped once fewer than STOP_MARGIN units
 *                    are left, before any token comes round again (see there); after the
 *                    window the round waits until the outbox is empty and MySQL holds every order
 *                    (the writer runs on the runtime under test: QStash delivers the drains to its
 *                    drain route, ORDER_DRAIN_PATH) and until the local QStash is quiet
 *   <rt>-sold-out    the sold-out phase: the same endpoint on a voucher sold out in setup, the
 *                    swarm script over 2,000 warm sessions: every answer is SOLD_OUT
 *   <rt>-shop-l1     GET /api/shop/{id} from the isolate's L1 (50 warm ids, wrk/rotate-ids.lua)
 *
 * Columns:
 *   ÷ hello             rps ÷ the matching hello-world's rps in the same round (median over rounds):
 *                       sale and sold out ÷ <rt>-hello-post, shop-l1 ÷ <rt>-hello (= its ratio).
 *                       Targets (issue 15): sale ≥ 0.5, L1 ≥ 0.7
 *   Redis cmds/attempt  commands the server's own Upstash-REST stand-in received ÷ attempts: for
 *                       the sale from the round's start until QStash is quiet (the writer's claims
 *                       and acks and all background upkeep included), for sold out and L1 over the
 *                       window
 *   REST trips/attempt  HTTP requests to that stand-in (Redis round trips), same spans
 *   sold                units sold in the round (Redis buyers)
 *   unwritten orders    the round's buyers Redis holds but MySQL does not once the writer stopped
 *                       progressing (or was done)
 *   outbox left         reservations still in the row's outbox then, earlier rounds' included (0
 *                       when every order of the row was written; no cron runs in the bench to
 *                       sweep what a failed drain left)
 *   error lines         error lines the server printed in the round (lib/servers.ts: the app's
 *                       JSON error logs, workerd's and Deno's own stderr lines); Bun: the app's
 *                       error log count (servers/app-seckill.ts), none for hello and the L1 app
 *   errors              wrk's non-2xx and socket errors + 200 answers that were neither a success,
 *                       SOLD_OUT nor (sale only) DUPLICATE_ORDER + "unhandled error" log lines.
 *                       Target 0. The round's log line splits them (4xx, 5xx, socket errors and
 *                       timeouts; wrk/seckill-swarm.lua counts statuses by class)
 * "Attempts": the answers wrk counted, or for the sale the units sold if larger (requests in flight
 * when wrk stops are answered and sell, but wrk does not count them).
 */
import { join } from "node:path";
import { ORDER_DRAIN_PATH } from "../../../src/queue/messages.ts";
import { keys } from "../../../src/redis/keys.ts";
import { appStack, ROTATE_IDS_LUA, type AppStack } from "../fixtures/app-stack.ts";
import {
  errorLinesSince,
  RUNTIMES,
  startApp,
  startHello,
  WORKERD_HOST,
  type RuntimeApp,
  type RuntimeName,
} from "../fixtures/runtimes.ts";
import {
  qstashQuiet,
  redisTotal,
  seckillStack,
  sellTheOneUnit,
  SWARM,
  waitUntil,
  warmTokensFile,
  type AppServer,
  type PipelineStats,
  type SeckillStack,
} from "../fixtures/seckill-stack.ts";
import { uncountedCpu } from "../lib/cpu.ts";
import { sumCounts } from "../lib/servers.ts";
import { assertLoopback, formatInt, sleep } from "../lib/util.ts";
import { execWrk, parseWrkOutput, runWrk } from "../lib/wrk.ts";
import {
  defineScenario,
  type BenchContext,
  type Extras,
  type Measurement,
  type RunOptions,
  type Scenario,
} from "../types.ts";
import type { UpstashRestStats } from "../../stack/upstash-rest.ts";

export const SET = "runtimes";
const SWARM_LUA = join(import.meta.dir, "../wrk/seckill-swarm.lua");
/** Units per sale round: one per buyer of the token file, so every attempt is a first-time buyer with stock left. */
const SALE_STOCK = 20_000;
/**
 * wrk is stopped once fewer units than this are left: stock = buyers, so at the sell-out wrk would
 * start over at the first token and the window would end in a burst of cheap DUPLICATE_ORDER
 * answers (a stop takes wrk up to ~100 ms, plus the poll; ~7,000 such answers were seen on Bun).
 * Stopping a margin early keeps the window first-time buyers with stock left, nothing else.
 */
const STOP_MARGIN = 5_000;
/** Warm sessions of the sold-out rows (within SESSION_CACHE_MAX). */
const WARM_TOKENS = 2_000;
/** Each runtime's rows sell from shops of their own (own hash tag and outbox; other groups use 101–110). */
const SHOPS: Record<RuntimeName, { sale: number; soldOut: number }> = {
  bun: { sale: 121, soldOut: 122 },
  workerd: { sale: 123, soldOut: 124 },
  deno: { sale: 125, soldOut: 126 },
};
/** The wait for the writer after a sale window ends when MySQL and the outbox stop changing for this long… */
const DRAIN_STALL_MS = 8_000;
/** …or at the latest after this (the runner allows a window + 30 s per round). */
const DRAIN_MAX_MS = 22_000;

const group = (rt: RuntimeName) => `runtime-${rt}`;
const RT_LABEL: Record<RuntimeName, string> = {
  bun: "Bun (Bun.serve)",
  workerd:
    WORKERD_HOST === "direct"
      ? "workerd (the wrangler-built bundle, `workerd serve` with the bundle's worker on the socket)"
      : "workerd (the wrangler-built bundle in miniflare: its entry worker routes to ours inside workerd)",
  deno: "Deno (Deno.serve)",
};

// ------------------------------------------------------------------------------------ wrk swarm

interface SwarmCounts {
  successes: number;
  soldOut: number;
  duplicate: number;
  /** Status 200 but neither a success, SOLD_OUT nor DUPLICATE_ORDER. */
  other: number;
  /** Answers by status class other than 200. */
  s3xx: number;
  s4xx: number;
  s5xx: number;
  /** The first 5xx answer a wrk thread saw: status and the start of its body ("" if none). */
  first5xx: string;
}

function parseSwarmLine(out: string): SwarmCounts {
  const m = /^SECKILL successes=(\d+) sold_out=(\d+) duplicate=(\d+) other=(\d+)/m.exec(out);
  if (!m) throw new Error(`wrk output has no SECKILL line (wrk/seckill-swarm.lua's done())\n${out}`);
  const st = /^SECKILL_STATUS 3xx=(\d+) 4xx=(\d+) 5xx=(\d+)/m.exec(out);
  return {
    successes: Number(m[1]),
    soldOut: Number(m[2]),
    duplicate: Number(m[3]),
    other: Number(m[4]),
    s3xx: Number(st?.[1] ?? Number.NaN),
    s4xx: Number(st?.[2] ?? Number.NaN),
    s5xx: Number(st?.[3] ?? Number.NaN),
    first5xx: /^SECKILL_5XX (.*)$/m.exec(out)?.[1]?.slice(0, 300) ?? "",
  };
}

/** "1,234 ok, 0 SOLD_OUT, …": what the swarm heard, for the log. */
const swarmSummary = (m: Measurement, w: SwarmCounts): string =>
  `${formatInt(m.requests)} answers (${formatInt(w.successes)} ok, ${formatInt(w.soldOut)} SOLD_OUT, ${formatInt(w.duplicate)} DUPLICATE, ${formatInt(w.other)} other 200, ` +
  `${formatInt(w.s4xx)} 4xx, ${formatInt(w.s5xx)} 5xx, ${formatInt(m.errors - w.s4xx - w.s5xx)} socket errors/timeouts)` +
  (w.first5xx ? `; first 5xx: ${w.first5xx}` : "");

/** One wrk window of SWARM connections with the swarm script: POST with a token per request, round robin. */
async function swarmWindow(
  ctx: BenchContext,
  url: string,
  tokensFile: string,
  seconds: number,
  stop?: AbortSignal,
): Promise<{ m: Measurement; swarm: SwarmCounts }> {
  assertLoopback(url);
  const out = await execWrk(
    [
      `-t${ctx.threads}`,
      `-c${SWARM}`,
      `-d${seconds}s`,
      "--latency",
      "--timeout",
      "5s",
      "-s",
      SWARM_LUA,
      url,
      "--",
      tokensFile,
    ],
    seconds,
    stop,
  );
  return { m: parseWrkOutput(out), swarm: parseSwarmLine(out) };
}

const windowSeconds = (ms: number) => Math.max(1, Math.round(ms / 1000));

const restDiff = (a: UpstashRestStats, b: UpstashRestStats) => ({
  requests: b.requests - a.requests,
  commands: b.commands - a.commands,
});

/** "error: unhandled error 3, stderr: … 2", largest first. */
const countsSummary = (r: Record<string, number>): string =>
  Object.entries(r)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 4)
    .map(([k, v]) => `${k} ×${v}`)
    .join("; ") || "none";

/** Waits for the local QStash to hold nothing due for `url`; on timeout says what is left instead of failing the round. */
async function quiet(stack: SeckillStack, url: string, timeoutMs: number): Promise<string | null> {
  try {
    // qstashQuiet reads only the server's URL (messages whose destination starts with it).
    await qstashQuiet(stack, { url } as AppServer, timeoutMs);
    return null;
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  }
}

// ----------------------------------------------------------------------------------- hellos

function helloScenario(rt: RuntimeName): Scenario {
  return defineScenario({
    name: `${rt}-hello`,
    group: group(rt),
    set: SET,
    baseline: true,
    description: `GET /?id={1..50} on a Hono hello-world on ${RT_LABEL[rt]}, wrk/rotate-ids.lua as the L1 read — the denominator of ${rt}-shop-l1`,
    async setup(ctx) {
      const server = await startHello(ctx, rt);
      return { kind: "http", url: `${server.url}/?id=`, luaScript: ROTATE_IDS_LUA, teardown: server.stop };
    },
  });
}

function helloPostScenario(rt: RuntimeName): Scenario {
  return defineScenario({
    name: `${rt}-hello-post`,
    group: group(rt),
    set: SET,
    description:
      `POST / on a Hono hello-world on ${RT_LABEL[rt]}, ${SWARM} wrk connections, wrk/seckill-swarm.lua over the 20,000 buyers' tokens (same script, connections and timeout as the seckill rows) — ` +
      `the denominator of ${rt}-sale and ${rt}-sold-out`,
    async setup(ctx) {
      const stack = await seckillStack(ctx);
      const server = await startHello(ctx, rt);
      return {
        kind: "run",
        run: async (opts) =>
          (await swarmWindow(ctx, `${server.url}/`, stack.tokensFile, windowSeconds(opts.durationMs))).m,
        teardown: server.stop,
      };
    },
  });
}

// ------------------------------------------------------------------------------------- sale

/** One request at a time before anything is measured: a success, then SOLD_OUT, then the order in MySQL (QStash → the server's drain). */
async function smokeTest(stack: SeckillStack, app: RuntimeApp, shopId: number): Promise<void> {
  const cfg = await stack.newVoucher({ shopId, stock: 1, buckets: 1 });
  const tokens = (await Bun.file(stack.tokensFile).text()).split("\n").slice(0, 2);
  const url = `${app.url}/api/voucher-order/seckill/${cfg.voucherId}`;
  const bodies: string[] = [];
  for (const token of tokens) {
    const res = await fetch(url, {
      method: "POST",
      headers: { authorization: token },
      signal: AbortSignal.timeout(10_000),
    });
    bodies.push(`${res.status} ${await res.text()}`);
  }
  if (!bodies[0]!.startsWith('200 {"success":true,"data":"') || !bodies[1]!.includes('"SOLD_OUT"')) {
    throw new Error(
      `smoke test on ${app.runtime}: expected a success then SOLD_OUT, got\n${bodies.join("\n")}\n--- server output ---\n${app.output().slice(-3000)}`,
    );
  }
  await waitUntil(
    () =>
      `smoke test on ${app.runtime}: the order to reach MySQL (QStash → ${app.url}${ORDER_DRAIN_PATH})\n${app.output().slice(-3000)}`,
    async () => (await stack.mysqlCounts(cfg.voucherId)).orders === 1,
    15_000,
    50,
  );
  const left = await quiet(stack, app.url, 15_000);
  if (left) throw new Error(`smoke test on ${app.runtime}: ${left}`);
}

function saleScenario(rt: RuntimeName): Scenario {
  const name = `${rt}-sale`;
  const shopId = SHOPS[rt].sale;
  return defineScenario({
    name,
    group: group(rt),
    set: SET,
    ratioTo: [{ scenario: `${rt}-hello-post`, column: "÷ hello" }],
    description:
      `the on-sale phase on ${RT_LABEL[rt]}: POST /api/voucher-order/seckill/{id}, ${SWARM} wrk connections, 20,000 buyers' sessions round robin, a fresh voucher of ${SALE_STOCK.toLocaleString("en-US")} units per round ` +
      `(every attempt a first-time buyer with stock left: wrk is stopped once fewer than ${STOP_MARGIN.toLocaleString("en-US")} are left), the writer on the same runtime draining concurrently (QStash → its ${ORDER_DRAIN_PATH}); ` +
      '"Redis cmds/attempt" and "REST trips/attempt" at the server\'s own Upstash-REST stand-in from the round\'s start until QStash is quiet (writer and background included); "÷ hello" = rps ÷ ' +
      `${rt}-hello-post's in the same round (target ≥ 0.5)`,
    async setup(ctx) {
      const stack = await seckillStack(ctx);
      const app = await startApp(ctx, rt, { kind: "seckill", stack });
      try {
        await smokeTest(stack, app, shopId);
      } catch (e) {
        await app.stop();
        throw e;
      }
      let round = 0;
      return {
        kind: "run",
        run: (opts) => saleRound(ctx, stack, app, name, shopId, opts, opts.warmup ? 0 : ++round),
        teardown: app.stop,
      };
    },
  });
}

async function saleRound(
  ctx: BenchContext,
  stack: SeckillStack,
  app: RuntimeApp,
  name: string,
  shopId: number,
  opts: RunOptions,
  round: number,
): Promise<Measurement> {
  const stock = SALE_STOCK;
  const cfg = await stack.newVoucher({ shopId, stock, buckets: 1 });
  const stockKey = keys.seckill.stock(shopId, cfg.voucherId, 0);
  const buyersKey = keys.seckill.buyers(shopId, cfg.voucherId);
  const outboxKey = keys.seckill.outbox(shopId);
  const url = `${app.url}/api/voucher-order/seckill/${cfg.voucherId}`;
  // The warm-up is a second longer than a window, as seckill-sale's (sessions, JIT, pools settle).
  const seconds = windowSeconds(opts.warmup ? ctx.durationMs + 1000 : opts.durationMs);

  const before = await uncountedCpu(() => quiet(stack, app.url, 10_000));
  if (before) ctx.log(`  ${name}: before the round: ${before}`);
  const e0 = await app.errorLines();
  const b0 = app.bunSeckill ? await app.bunSeckill.ask<PipelineStats>({ type: "pipeline-stats" }) : null;
  const r0 = app.rest.stats();

  // Stop wrk (SIGINT: it reports as usual) once fewer than STOP_MARGIN units are left.
  const stopWrk = new AbortController();
  let polling = true;
  let soldOutMs = Number.NaN;
  const t0 = performance.now();
  const poller = (async () => {
    while (polling) {
      if (Number((await stack.raw.send("GET", [stockKey])) ?? 0) < STOP_MARGIN) {
        soldOutMs = performance.now() - t0;
        stopWrk.abort();
        return;
      }
      await sleep(5);
    }
  })();
  let w: { m: Measurement; swarm: SwarmCounts };
  try {
    w = await swarmWindow(ctx, url, stack.tokensFile, seconds, stopWrk.signal);
  } finally {
    polling = false;
    await poller.catch(() => {});
  }
  const r1 = app.rest.stats();
  const { m, swarm } = w;

  // The writer: until MySQL holds every buyer and the outbox is empty, or nothing moved for DRAIN_STALL_MS.
  let last = { buyers: 0, outbox: -1, orders: -1 };
  let stalled = false;
  const tDrain = performance.now();
  await uncountedCpu(async () => {
    let movedAt = performance.now();
    for (;;) {
      const [buyers, outbox] = (await Promise.all([
        stack.raw.send("SCARD", [buyersKey]),
        stack.raw.send("HLEN", [outboxKey]),
      ])) as [number, number];
      const orders = (await stack.mysqlCounts(cfg.voucherId)).orders;
      if (outbox === 0 && orders === buyers) {
        last = { buyers, outbox, orders };
        return;
      }
      if (outbox !== last.outbox || orders !== last.orders) movedAt = performance.now();
      last = { buyers, outbox, orders };
      if (performance.now() - movedAt > DRAIN_STALL_MS || performance.now() - tDrain > DRAIN_MAX_MS) {
        stalled = true;
        return;
      }
      await sleep(50);
    }
  });
  const drainS = (performance.now() - tDrain) / 1000;
  const after = await uncountedCpu(() => quiet(stack, app.url, stalled ? 2_000 : 15_000));
  const r2 = app.rest.stats();
  const e2 = await errorLinesSince(app, e0);
  const b2 = app.bunSeckill ? await app.bunSeckill.ask<PipelineStats>({ type: "pipeline-stats" }) : null;

  const sold = Number(await stack.raw.send("SCARD", [buyersKey]));
  const left = Number((await stack.raw.send("GET", [stockKey])) ?? 0);
  const db = await stack.mysqlCounts(cfg.voucherId);
  // Broken conservation is a bug, not a slow row: the round fails.
  const broken: string[] = [];
  if (sold + left !== stock) broken.push(`Redis: ${sold} buyers + ${left} units left ≠ ${stock}`);
  if (swarm.successes > sold) broken.push(`wrk saw ${swarm.successes} successes, Redis has ${sold} buyers`);
  if (db.orders > sold) broken.push(`MySQL has ${db.orders} orders, Redis ${sold} buyers`);
  if (db.orders === sold && db.stock !== stock - sold) broken.push(`MySQL stock ${db.stock} ≠ ${stock} − ${sold} sold`);
  if (broken.length) throw new Error(`${name}: ${broken.join("; ")}`);
  const unwritten = sold - db.orders;
  // Reservations of this row's shop still in the outbox: earlier rounds' (and the warm-up's) included.
  const outboxLeft = Number(await stack.raw.send("HLEN", [outboxKey]));

  const attempts = Math.max(m.requests, sold);
  const win = restDiff(r0, r1);
  const all = restDiff(r0, r2);
  const unhandled = e2["error: unhandled error"] ?? 0;
  if (round > 0) {
    const bunSide =
      b0 && b2
        ? `; app-client count (servers/app-seckill.ts) ${formatInt(redisTotal(b2.redis) - redisTotal(b0.redis))} cmds, ${formatInt(b2.served - b0.served)} attempts served`
        : "";
    ctx.log(
      `  ${name} #${round}: ${formatInt(sold)}/${formatInt(stock)} sold${Number.isNaN(soldOutMs) ? "" : ` (wrk stopped ${soldOutMs.toFixed(0)} ms in, < ${formatInt(STOP_MARGIN)} left)`}; wrk ${swarmSummary(m, swarm)}; ` +
        `stand-in: ${formatInt(win.commands)} cmds / ${formatInt(win.requests)} trips in the window, ${formatInt(all.commands)} / ${formatInt(all.requests)} until quiet${bunSide}; ` +
        `writer ${stalled ? `stalled after ${drainS.toFixed(1)} s: ${last.orders} of ${last.buyers} orders in MySQL, ${last.outbox} in the outbox` : `done ${drainS.toFixed(1)} s after the window`}` +
        `${after ? `; ${after}` : ""}; error lines: ${countsSummary(e2)}`,
    );
    if (sumCounts(e2) > 0)
      ctx.log(`  ${name} #${round} last error lines: ${(await app.lastErrors()).slice(-2).join(" | ").slice(0, 1200)}`);
  }
  const extras: Extras = {
    sold,
    "Redis cmds/attempt": attempts > 0 ? all.commands / attempts : Number.NaN,
    "REST trips/attempt": attempts > 0 ? all.requests / attempts : Number.NaN,
    "unwritten orders": unwritten,
    "outbox left": outboxLeft,
    "error lines": sumCounts(e2),
  };
  // DUPLICATE_ORDER is a right answer here: once every buyer of the token file has tried, wrk starts
  // over at the first token (only at the sell-out, since stock = buyers), and those have bought.
  return { ...m, errors: m.errors + swarm.other + unhandled, extras };
}

// ---------------------------------------------------------------------------------- sold out

function soldOutScenario(rt: RuntimeName): Scenario {
  const name = `${rt}-sold-out`;
  const shopId = SHOPS[rt].soldOut;
  return defineScenario({
    name,
    group: group(rt),
    set: SET,
    ratioTo: [{ scenario: `${rt}-hello-post`, column: "÷ hello" }],
    description:
      `the sold-out phase on ${RT_LABEL[rt]}: POST /api/voucher-order/seckill/{id} on a voucher whose one unit was bought in setup, ${SWARM} wrk connections, the swarm script over ` +
      `${WARM_TOKENS.toLocaleString("en-US")} warm sessions: every answer SOLD_OUT from the isolate's sold-out memo; Redis cmds and REST trips per attempt at the server's own stand-in over the window`,
    async setup(ctx) {
      const stack = await seckillStack(ctx);
      const tokensFile = await warmTokensFile(stack, WARM_TOKENS);
      const app = await startApp(ctx, rt, { kind: "seckill", stack });
      let url: string;
      let buyersKey: string;
      try {
        const cfg = await stack.newVoucher({ shopId, stock: 1, buckets: 1 });
        url = `${app.url}/api/voucher-order/seckill/${cfg.voucherId}`;
        buyersKey = keys.seckill.buyers(shopId, cfg.voucherId);
        await sellTheOneUnit(stack, url, name, 10_000);
        await waitUntil(
          () => `${name} setup: the one order to reach MySQL`,
          async () => (await stack.mysqlCounts(cfg.voucherId)).orders === 1,
          15_000,
          50,
        );
        const left = await quiet(stack, app.url, 15_000);
        if (left) throw new Error(`${name} setup: ${left}`);
      } catch (e) {
        await app.stop();
        throw e;
      }
      let round = 0;
      return {
        kind: "run",
        async run(opts) {
          const e0 = await app.errorLines();
          const r0 = app.rest.stats();
          const { m, swarm } = await swarmWindow(ctx, url, tokensFile, windowSeconds(opts.durationMs));
          const d = restDiff(r0, app.rest.stats());
          const e1 = await errorLinesSince(app, e0);
          const buyers = Number(await stack.raw.send("SCARD", [buyersKey]));
          if (buyers !== 1 || swarm.successes > 0)
            throw new Error(`${name}: ${buyers} buyers and ${swarm.successes} successes on a voucher that had 1 unit`);
          if (!opts.warmup) {
            ctx.log(
              `  ${name} #${++round}: wrk ${swarmSummary(m, swarm)}; stand-in ${formatInt(d.commands)} cmds / ${formatInt(d.requests)} trips; error lines: ${countsSummary(e1)}`,
            );
            if (sumCounts(e1) > 0)
              ctx.log(
                `  ${name} #${round} last error lines: ${(await app.lastErrors()).slice(-2).join(" | ").slice(0, 1200)}`,
              );
          }
          return {
            ...m,
            errors: m.errors + swarm.other + swarm.duplicate + (e1["error: unhandled error"] ?? 0),
            extras: {
              "Redis cmds/attempt": m.requests > 0 ? d.commands / m.requests : Number.NaN,
              "REST trips/attempt": m.requests > 0 ? d.requests / m.requests : Number.NaN,
              "error lines": sumCounts(e1),
            },
          };
        },
        teardown: app.stop,
      };
    },
  });
}

// ---------------------------------------------------------------------------------------- L1

async function checkShops(base: string, ids: readonly number[]): Promise<void> {
  for (const id of ids) {
    const res = await fetch(`${base}${id}`, { signal: AbortSignal.timeout(10_000) });
    const text = await res.text();
    type Envelope = { success?: unknown; data?: { id?: unknown } } | null;
    let body: Envelope = null;
    try {
      body = JSON.parse(text) as Envelope;
    } catch {
      /* reported below */
    }
    if (res.status !== 200 || body?.success !== true || body.data?.id !== id)
      throw new Error(`GET ${base}${id} answered ${res.status} ${text.slice(0, 300)}`);
  }
}

function shopL1Scenario(rt: RuntimeName): Scenario {
  const name = `${rt}-shop-l1`;
  return defineScenario({
    name,
    group: group(rt),
    set: SET,
    ratioTo: [{ scenario: `${rt}-hello`, column: "÷ hello" }],
    description:
      `GET /api/shop/{id} on the app on ${RT_LABEL[rt]}, 50 warm ids (wrk/rotate-ids.lua): served from the isolate's L1; ` +
      `Redis cmds and REST trips per request at the server's own stand-in; "÷ hello" = ratio = rps ÷ ${rt}-hello's in the same round (target ≥ 0.7)`,
    async setup(ctx) {
      const stack: AppStack = await appStack(ctx);
      const app = await startApp(ctx, rt, { kind: "shop", stackEnv: stack.env });
      const base = `${app.url}/api/shop/`;
      try {
        await checkShops(base, stack.ids);
        // Warm: a second pass comes from L1 (one REST request allowed: a metrics flush may land in it).
        const rest0 = app.rest.stats().requests;
        const db0 = stack.dbRequests();
        await checkShops(base, stack.ids);
        const rest = app.rest.stats().requests - rest0;
        const db = stack.dbRequests() - db0;
        if (rest > 1 || db > 0)
          throw new Error(
            `${name}: a warm pass over ${stack.ids.length} ids made ${rest} Redis and ${db} MySQL requests (expected ≤ 1 and 0): not L1`,
          );
      } catch (e) {
        await app.stop();
        throw e;
      }
      const target = { kind: "http" as const, url: base, luaScript: ROTATE_IDS_LUA, teardown: async () => {} };
      let round = 0;
      return {
        kind: "run",
        async run(opts) {
          const e0 = await app.errorLines();
          const r0 = app.rest.stats();
          const m = await runWrk(target, {
            durationMs: opts.durationMs,
            connections: ctx.connections,
            threads: ctx.threads,
            tmpDir: ctx.tmpDir,
          });
          const d = restDiff(r0, app.rest.stats());
          const e1 = await errorLinesSince(app, e0);
          if (!opts.warmup && sumCounts(e1) > 0) {
            ctx.log(`  ${name} #${++round}: error lines: ${countsSummary(e1)}`);
            ctx.log(
              `  ${name} #${round} last error lines: ${(await app.lastErrors()).slice(-2).join(" | ").slice(0, 1200)}`,
            );
          } else if (!opts.warmup) round++;
          return {
            ...m,
            errors: m.errors + (e1["error: unhandled error"] ?? 0),
            extras: {
              "Redis cmds/attempt": m.requests > 0 ? d.commands / m.requests : Number.NaN,
              "REST trips/attempt": m.requests > 0 ? d.requests / m.requests : Number.NaN,
              "error lines": sumCounts(e1),
            },
          };
        },
        teardown: app.stop,
      };
    },
  });
}

export default RUNTIMES.flatMap((rt) => [
  helloScenario(rt),
  helloPostScenario(rt),
  saleScenario(rt),
  soldOutScenario(rt),
  shopL1Scenario(rt),
]);

/**
 * Group "seckill": a buyer swarm against the real endpoint, POST /api/voucher-order/seckill/{id},
 * next to the Redis script it is built around, measured in the same rounds.
 *
 * Endpoint rows (seckill-endpoint, seckill-endpoint-b8): the real app in its own bun process
 * (servers/app-seckill.ts), SWARM (200) wrk connections whatever --connections says, the buyers'
 * tokens round robin from USERS (20,000) sessions (wrk/seckill-swarm.lua), so the first 20,000
 * requests of a round come from distinct users. Every round (and the warm-up) sells a fresh
 * voucher of STOCK units — far less than the demand — so each round has two phases:
 *   sale       until the stock is gone: session check + reserve-stock.lua (+ the batched drain announcement);
 *   sold out   the rest of the window: the session check, then the isolate's
 *              sold-out memo answers (one EVALSHA per SOLD_OUT_MEMO_MS, default 1 s).
 * rps/p50/p99 are wrk's, over the whole window (both phases). "orders/s" is the sale phase alone:
 * (units − 1) ÷ the time between the first and the last sold unit, from the order ids wrk saw
 * (ids embed their millisecond). The writer drains concurrently, as in production (QStash
 * delivers each write back to the same app); after the window the round waits until the outbox
 * is empty and MySQL holds every order, then checks MySQL orders = Redis buyers = units sold and
 * tb_seckill_voucher.stock = STOCK − sold (a failed check fails the row). That wait is outside
 * wrk's window and its CPU is left out of "CPU µs/op" (lib/cpu.ts uncountedCpu).
 *
 * Baseline (seckill-evalsha): the same lua/reserve-stock.lua with the KEYS/ARGV reserve() builds,
 * through @upstash/redis (createScript → EVALSHA, the app's own client and options) and the same
 * Upstash-REST stand-in, SWARM closed loops in a process of their own (the app-seckill child,
 * serving no HTTP then), a fresh voucher of BASELINE_STOCK units per round. Every call reaches Redis, also
 * after the sell-out (no memo, no session).
 *
 * Cost model (what the counters confirm; batched pipeline, see src/services/seckill/pipeline.ts
 * and writer.ts): a sold unit costs the EVALSHA of reserve-stock.lua on the request path (it also
 * writes the outbox entry), the session check (src/services/session*.ts: answered from the
 * isolate's session cache once warm, plus one sync command per SESSION_SYNC_MS) and the isolate's
 * share of one order-index HSET per 10 ms flush. Nothing per order goes to QStash: the isolate announces one drain per shop
 * per one-second window (deduplicated, delivered at the window's end); the writer claims groups of
 * up to ORDER_GROUP_MAX from the outbox (one command), writes each in one MySQL transaction, acks
 * it (one command), publishes one delayed close per group and one follow-up drain per delivery
 * that found work. After the sell-out the isolate's sold-out memo spares the EVALSHA. The warm-up
 * reaches the buyers every round starts with, so measured rounds see warm sessions and repeat
 * visitors.
 *
 * Extra columns (from the stand-ins' counters and the app's, read around the round; the round
 * ends when the outbox is empty, MySQL holds every order and the local QStash is quiet — the
 * follow-up drains delivered — so the counts cover everything the round's orders caused):
 *   sold / oversell       units sold (Redis buyers) / max(wrk successes, buyers, MySQL orders) − stock
 *   orders/s              sale-phase rate, see above
 *   REST trips/req        Upstash-REST HTTP requests (= Redis round trips) per request or call in
 *                         wrk's window; < 1 means auto-pipelining shared round trips
 *   Redis cmds/req        Redis commands per request or call in the window, the writer's excluded
 *   Redis cmds/1k orders  request-side commands of the sale phase (start → the poller sees stock 0;
 *                         sessions, EVALSHA, order index, UV), the writer's excluded, per 1,000
 *                         units sold; the sold-out phase adds "Redis cmds/req" per further request
 *   writer Redis cmds/1k orders  the writer side's commands of the round (claims, acks, hand-backs,
 *                         releases), counted at the app's Redis client (servers/app-seckill.ts), per
 *                         1,000 units sold
 *   QStash msgs/1k orders messages published for the round (drains, follow-up drains, closes) plus
 *                         failed delivery attempts (retries), per 1,000 units sold
 *   lock conflicts        MySQL lock conflicts the app met and retried (deps.isolate.orderGroups.lockConflicts)
 *   InnoDB deadlocks      MariaDB Innodb_deadlocks delta over the round
 *   unhandled errors      "unhandled error" lines of the app's log (must be 0)
 *
 * seckill-burst-10k: BURST (10,000) units reserved in one burst by distinct buyers (the swarm
 * script, SWARM connections; wrk is stopped with SIGINT the moment Redis holds BURST buyers, so only
 * the requests in flight then see SOLD_OUT); rps = BURST ÷ (first reservation — the smallest order
 * id's timestamp — → the BURST-th row in MySQL, polled directly); p50/p99 = wrk's latency. seckill-lone-order: one reservation through the endpoint on a
 * quiet stack, at a random moment of the drain window, → its row in MySQL; LONE per round.
 */
import { join } from "node:path";
import { ORDER_DRAIN_PATH } from "../../../src/queue/messages.ts";
import { keys } from "../../../src/redis/keys.ts";
import { loadSeckillIntoRedis, type SeckillConfig } from "../../../src/services/seckill/config.ts";
import {
  innodbDeadlocks,
  qstashQuiet,
  restDelta,
  seckillStack,
  sellTheOneUnit,
  startAppServer,
  SWARM,
  unhandledErrors,
  USER_BASE,
  USERS,
  waitUntil,
  writerRedisCommands,
  redisDiff,
  redisSummary,
  redisTotal,
  RESERVE,
  WRITER_KINDS,
  warmTokensFile,
  type AppServer,
  type PipelineStats,
  type SeckillStack,
} from "../fixtures/seckill-stack.ts";
import { uncountedCpu } from "../lib/cpu.ts";
import { spawnBunServer } from "../lib/proc.ts";
import { assertLoopback, formatInt, sleep } from "../lib/util.ts";
import { execWrk, parseWrkOutput } from "../lib/wrk.ts";
import {
  defineScenario,
  type BenchContext,
  type Extras,
  type Measurement,
  type RunOptions,
  type Scenario,
} from "../types.ts";
import type { UpstashRestStats } from "../../stack/upstash-rest.ts";

const GROUP = "seckill";
/**
 * Units per measured round of the endpoint rows. Sized to this stack: the endpoint sells a few
 * hundred units a second on the 2-core box (every Redis round trip is an HTTP request, and the
 * writer drains on the same cores), so 500 units sell out about half-way through a 2 s window and
 * the rest of it is the sold-out stampede; a round's demand is thousands of requests.
 */
const STOCK = 500;
/** Units of the baseline's rounds: the raw script sells ~20× faster, 5,000 give its sale phase a similar share of the window. */
const BASELINE_STOCK = 5000;
/** Units of a warm-up round (JIT, connection pools, the id lease, UV "seen" entries; not measured). */
const WARM_STOCK = 200;
const SWARM_LUA = join(import.meta.dir, "../wrk/seckill-swarm.lua");
/** Longest wait for the writer after a window (the runner allows a window + 30 s per round). */
const DRAIN_TIMEOUT_MS = 25_000;
/** Each row sells from its own shop: own hash tag, own outbox, so a round only sees its own orders. */
const SHOPS = { evalsha: 101, b1: 102, b8: 103, burst: 107, lone: 108, sale: 109, soldOut: 110 } as const;
/** Fake voucher ids of the baseline (Redis only, never in MySQL; far above auto-increment ids). */
let baselineVoucher = 900_000_000;

interface SwarmCounts {
  successes: number;
  soldOut: number;
  duplicate: number;
  other: number;
  minId: string;
  maxId: string;
}

function parseSwarmLine(out: string): SwarmCounts {
  const m = /^SECKILL successes=(\d+) sold_out=(\d+) duplicate=(\d+) other=(\d+) min_id=(\d*) max_id=(\d*)$/m.exec(out);
  if (!m) throw new Error(`wrk output has no SECKILL line (is wrk/seckill-swarm.lua's done() running?)\n${out}`);
  return {
    successes: Number(m[1]),
    soldOut: Number(m[2]),
    duplicate: Number(m[3]),
    other: Number(m[4]),
    minId: m[5]!,
    maxId: m[6]!,
  };
}

/**
 * Milliseconds from the first reserve-stock request the app sent to the reply of the last one, as
 * the app's client saw them (servers/app-seckill.ts). Not from order ids: an id's time is its
 * block's draw time (src/redis/ids.ts), up to a minute before the id was issued.
 */
function reserveSpanMs(p: Pick<PipelineStats, "firstReserveAt" | "lastReserveAt">): number {
  return p.firstReserveAt === null || p.lastReserveAt === null ? Number.NaN : p.lastReserveAt - p.firstReserveAt;
}

const perSecond = (units: number, ms: number): number =>
  units >= 2 && ms > 0 ? ((units - 1) * 1000) / ms : Number.NaN;

async function stockLeft(stack: SeckillStack, stockKeys: string[]): Promise<number> {
  const vals = (await stack.raw.send("MGET", stockKeys)) as (string | null)[];
  return vals.reduce((s, v) => s + Number(v ?? 0), 0);
}

/** Polls the stock directly in redis-server every ~2 ms; remembers when it first fell and hit 0. */
function stockPoller(
  stack: SeckillStack,
  stockKeys: string[],
  initial: number,
  app: AppServer,
  onSoldOut?: () => void,
) {
  const t0 = performance.now();
  const state = {
    firstSaleMs: Number.NaN,
    soldOutMs: Number.NaN,
    atSoldOut: null as UpstashRestStats | null,
    appAtSoldOut: null as PipelineStats | null,
    error: null as unknown,
  };
  let running = true;
  const loop = (async () => {
    try {
      while (running) {
        const left = await stockLeft(stack, stockKeys);
        const t = performance.now() - t0;
        if (left < initial && Number.isNaN(state.firstSaleMs)) state.firstSaleMs = t;
        if (left <= 0) {
          onSoldOut?.();
          state.soldOutMs = t;
          state.atSoldOut = stack.rest();
          // The writer's commands so far (it may drain during the sale): kept out of the sale's count.
          state.appAtSoldOut = await app.ask<PipelineStats>({ type: "pipeline-stats" });
          return;
        }
        await sleep(2);
      }
    } catch (e) {
      state.error = e;
    }
  })();
  return {
    state,
    async stop() {
      running = false;
      await loop;
    },
  };
}

// ------------------------------------------------------------------------------------- endpoint

function endpointScenario(buckets: 1 | 8): Scenario {
  const name = buckets === 1 ? "seckill-endpoint" : `seckill-endpoint-b${buckets}`;
  const shopId = buckets === 1 ? SHOPS.b1 : SHOPS.b8;
  return defineScenario({
    name,
    group: GROUP,
    description:
      `POST /api/voucher-order/seckill/{id} on the app (own bun process), ${SWARM} wrk connections, ${USERS.toLocaleString("en-US")} buyers' sessions round robin, ` +
      `a fresh voucher of ${STOCK.toLocaleString("en-US")} units per round${buckets > 1 ? ` split over ${buckets} Redis stock buckets` : " (one stock key)"}; ` +
      "rps/p50/p99 over the whole window (sale, then sold out); orders/s = sale phase only; the batched writer drains concurrently (one drain per shop per 1 s window through QStash) and MySQL is checked after each round. " +
      "Cost per order on the request path: the EVALSHA of reserve-stock.lua (which writes the outbox entry), the session check (answered from the isolate's session cache once warm, " +
      "plus its periodic sync command) and a share of one order-index HSET per 10 ms flush; writer: one claim + one ack per group of up to ORDER_GROUP_MAX (+ one empty claim per drain), " +
      "one delayed close per group, one drain per shop per window — a few Redis commands and QStash messages per 1,000 orders, no per-order message; after the sell-out the isolate's sold-out memo answers",
    async setup(ctx) {
      const stack = await seckillStack(ctx);
      const app = await startAppServer(stack);
      try {
        await smokeTest(stack, app, shopId, buckets);
      } catch (e) {
        await app.stop();
        throw e;
      }
      let round = 0;
      return {
        kind: "run",
        run: (opts) => swarmRound(ctx, stack, app, { name, shopId, buckets, round: opts.warmup ? 0 : ++round }, opts),
        teardown: app.stop,
      };
    },
  });
}

/** Two buyers, one unit, before anything is measured: a success, a SOLD_OUT, and the order in MySQL. */
async function smokeTest(stack: SeckillStack, app: AppServer, shopId: number, buckets: number): Promise<void> {
  const cfg = await stack.newVoucher({ shopId, stock: buckets, buckets });
  const tokens = (await Bun.file(stack.tokensFile).text()).split("\n").slice(0, buckets + 1);
  const url = `${app.url}/api/voucher-order/seckill/${cfg.voucherId}`;
  const bodies: string[] = [];
  for (const token of tokens) {
    const res = await fetch(url, {
      method: "POST",
      headers: { authorization: token },
      signal: AbortSignal.timeout(5000),
    });
    bodies.push(`${res.status} ${await res.text()}`);
  }
  const wins = bodies.filter((b) => b.startsWith('200 {"success":true,"data":"')).length;
  const last = bodies[bodies.length - 1]!;
  if (wins !== buckets || !last.includes('"SOLD_OUT"'))
    throw new Error(`smoke test: expected ${buckets} success(es) then SOLD_OUT, got\n${bodies.join("\n")}`);
  await waitUntil(
    () => `the smoke test's ${buckets} order(s) in MySQL (QStash → ${app.url}${ORDER_DRAIN_PATH})`,
    async () => (await stack.mysqlCounts(cfg.voucherId)).orders === buckets,
    10_000,
    50,
  );
}

async function swarmRound(
  ctx: BenchContext,
  stack: SeckillStack,
  app: AppServer,
  row: { name: string; shopId: number; buckets: number; round: number; stock?: number; stopAtSoldOut?: boolean },
  opts: RunOptions,
): Promise<Measurement> {
  const stock = row.stock ?? (opts.warmup ? WARM_STOCK : STOCK);
  const cfg = await stack.newVoucher({ shopId: row.shopId, stock, buckets: row.buckets });
  const stockKeys = Array.from({ length: row.buckets }, (_, i) => keys.seckill.stock(row.shopId, cfg.voucherId, i));
  const url = `${app.url}/api/voucher-order/seckill/${cfg.voucherId}`;
  assertLoopback(url);
  // The warm-up runs one second longer than a measured window (not --warmup's length): the buyers it reaches are the
  // ones every round starts with (wrk begins at the same tokens), so the app's per-isolate UV
  // "seen" entries exist for them and measured rounds are all alike (repeat visitors).
  const seconds = Math.max(1, Math.round((opts.warmup ? ctx.durationMs + 1000 : opts.durationMs) / 1000));

  // Nothing of an earlier round may still be on its way (uncounted: not the swarm's CPU).
  await uncountedCpu(() => qstashQuiet(stack, app, 10_000));
  const p0 = await app.ask<PipelineStats>({ type: "pipeline-stats", reset: true });
  const dl0 = await innodbDeadlocks(stack);
  const rest0 = stack.rest();
  const q0 = stack.qstash();
  // The on-sale row stops wrk (SIGINT: it reports as usual) the moment the poller sees stock 0.
  const stopWrk = new AbortController();
  const poller = stockPoller(stack, stockKeys, stock, app, row.stopAtSoldOut ? () => stopWrk.abort() : undefined);
  let out: string;
  try {
    out = await execWrk(
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
        stack.tokensFile,
      ],
      seconds,
      stopWrk.signal,
    );
  } finally {
    stopWrk.abort();
    await poller.stop();
  }
  const rest1 = stack.rest();
  const pW = await app.ask<PipelineStats>({ type: "pipeline-stats" });
  const m = parseWrkOutput(out);
  const swarm = parseSwarmLine(out);
  const sale = poller.state;

  // Until the outbox is empty and MySQL holds every reservation: the CPU of this wait is not the
  // swarm's (the writer's share during the window is, as in production).
  const buyersKey = keys.seckill.buyers(row.shopId, cfg.voucherId);
  const outboxKey = keys.seckill.outbox(row.shopId);
  const tDrain = performance.now();
  let last = { buyers: 0, outbox: 0, orders: 0 };
  await uncountedCpu(() =>
    waitUntil(
      () =>
        `the writer: ${last.orders} of ${last.buyers} orders in MySQL, ${last.outbox} reservations still in the outbox`,
      async () => {
        const [buyers, outbox] = (await Promise.all([
          stack.raw.send("SCARD", [buyersKey]),
          stack.raw.send("HLEN", [outboxKey]),
        ])) as [number, number];
        last = { buyers, outbox, orders: (await stack.mysqlCounts(cfg.voucherId)).orders };
        return outbox === 0 && last.orders === buyers;
      },
      DRAIN_TIMEOUT_MS,
      50,
    ),
  );
  const drainS = (performance.now() - tDrain) / 1000;
  // The follow-up drain comes a window later and ends the chain: its cost belongs to this round.
  await uncountedCpu(() => qstashQuiet(stack, app, 15_000));
  const rest2 = stack.rest();
  const q2 = stack.qstash();
  const p2 = await app.ask<PipelineStats>({ type: "pipeline-stats" });
  const dl2 = await innodbDeadlocks(stack);

  const sold = last.buyers;
  const left = await stockLeft(stack, stockKeys);
  const db = await stack.mysqlCounts(cfg.voucherId);
  const problems: string[] = [];
  if (sold + left !== stock) problems.push(`Redis: ${sold} buyers + ${left} units left ≠ ${stock}`);
  if (db.orders !== sold) problems.push(`MySQL has ${db.orders} orders, Redis ${sold} buyers`);
  if (db.stock !== stock - sold) problems.push(`MySQL stock ${db.stock} ≠ ${stock} − ${sold} sold`);
  if (swarm.successes > sold) problems.push(`wrk saw ${swarm.successes} successes, Redis has ${sold} buyers`);
  if (swarm.other > 0) problems.push(`${swarm.other} answers were neither success, SOLD_OUT nor DUPLICATE_ORDER`);
  if (problems.length) throw new Error(`${row.name}: ${problems.join("; ")}`);
  const oversell = Math.max(0, Math.max(swarm.successes, sold, db.orders) - stock);

  const win = restDelta(rest0, rest1);
  const all = restDelta(rest0, rest2);
  // The writer's commands are a few per round (a claim and an ack per group) and may share the
  // swarm's round trips (one auto-pipelined client per process): subtracted from both.
  const swarmTrips = win.requests - writerRedisCommands(pW);
  const swarmCmds = win.commands - writerRedisCommands(pW);
  const writerCmds = writerRedisCommands(p2);
  const saleDelta = restDelta(rest0, sale.atSoldOut ?? rest1);
  const saleCmds = saleDelta.commands - writerRedisCommands(sale.appAtSoldOut ?? pW);
  const published = q2.published - q0.published;
  const failed = q2.failedAttempts - q0.failedAttempts;
  const conflicts =
    p2.lockConflicts.retried + p2.lockConflicts.exhausted - (p0.lockConflicts.retried + p0.lockConflicts.exhausted);
  const deadlocks = dl2 - dl0;
  const unhandled = unhandledErrors(p2);
  const saleMs = reserveSpanMs(sale.appAtSoldOut ?? p2);

  // Per phase, at the app's own Redis client (servers/app-seckill.ts counts every command it
  // sends, background upkeep included): the sale = round start → the poller's sold-out snapshot,
  // plus every writer-side command of the round (the drains of the sale's orders, also those
  // after the window); sold out = the snapshot → the window's end, writer commands excluded.
  const atSoldOut = sale.appAtSoldOut;
  const soldOutRedis = atSoldOut ? redisDiff(atSoldOut.redis, pW.redis) : {};
  for (const k of WRITER_KINDS) delete soldOutRedis[k];
  const soldOutCmds = redisTotal(soldOutRedis);
  const roundCmds = redisTotal(p2.redis);
  const saleAttempts = atSoldOut ? atSoldOut.served : pW.served;
  const soldOutAttempts = atSoldOut ? pW.served - atSoldOut.served : 0;
  // Commands caused by the round but sent after the window: the writer's (and nothing else: no requests then).
  const saleRedis = redisDiff(soldOutRedis, p2.redis);
  const saleCmds2 = roundCmds - soldOutCmds;
  const reserveCalls = saleRedis[RESERVE] ?? 0;

  if (!opts.warmup) {
    ctx.log(
      `  ${row.name} #${row.round}: app-client Redis, sale phase (${formatInt(saleAttempts)} attempts): ${redisSummary(saleRedis)}; ` +
        `sold-out phase (${formatInt(soldOutAttempts)} attempts): ${redisSummary(soldOutRedis)}`,
    );
    const soldOut = Number.isNaN(sale.soldOutMs)
      ? "not sold out in the window"
      : `sold out ${sale.soldOutMs.toFixed(0)} ms into the window (poller; first sale at ${sale.firstSaleMs.toFixed(0)} ms)`;
    ctx.log(
      `  ${row.name} #${row.round}: ${formatInt(sold)}/${formatInt(stock)} sold, ${saleMs.toFixed(0)} ms first→last order id, ${soldOut}; ` +
        `wrk ${formatInt(m.requests)} answers (${formatInt(swarm.successes)} ok, ${formatInt(swarm.soldOut)} SOLD_OUT, ${formatInt(swarm.duplicate)} DUPLICATE); ` +
        `Redis: ${formatInt(saleCmds)} cmds in the sale, ${formatInt(swarmCmds)} swarm cmds / ${formatInt(swarmTrips)} trips in the window, ${formatInt(writerCmds)} writer cmds, ` +
        `${formatInt(all.commands)} in all (${((all.commands / Math.max(1, sold)) * 1000).toFixed(0)} per 1k orders incl. the sold-out phase); ` +
        `QStash ${formatInt(published)} published / ${failed} failed attempts (${p2.drains} drain deliveries), writer done ${drainS.toFixed(1)} s after the window; MySQL ${formatInt(db.orders)} orders, stock ${db.stock}; ` +
        `lock conflicts ${conflicts}, InnoDB deadlocks ${deadlocks}, unhandled errors ${unhandled}`,
    );
    if (p2.lastErrors.length) ctx.log(`  app errors: ${p2.lastErrors.join(" | ")}`);
  }
  if (sale.error) ctx.log(`  ${row.name}: stock poller failed: ${String(sale.error)}`);

  const extras: Extras = {
    sold,
    oversell,
    "orders/s": perSecond(swarm.successes, saleMs),
    "REST trips/req": swarmTrips / m.requests,
    "Redis cmds/req": swarmCmds / m.requests,
    "p99÷p50": m.p99Ms / m.p50Ms,
    "sale: Redis cmds/attempt": saleAttempts > 0 ? saleCmds2 / saleAttempts : Number.NaN,
    "sale: reserve EVALSHA/attempt": saleAttempts > 0 ? reserveCalls / saleAttempts : Number.NaN,
    "sale: other cmds/attempt": saleAttempts > 0 ? (saleCmds2 - reserveCalls) / saleAttempts : Number.NaN,
    ...(soldOutAttempts > 0 ? { "sold out: Redis cmds/attempt": soldOutCmds / soldOutAttempts } : {}),
    "Redis cmds/1k orders": sold > 0 ? (saleCmds / sold) * 1000 : Number.NaN,
    "writer Redis cmds/1k orders": sold > 0 ? (writerCmds / sold) * 1000 : Number.NaN,
    "QStash msgs/1k orders": sold > 0 ? ((published + failed) / sold) * 1000 : Number.NaN,
    "lock conflicts": conflicts,
    "InnoDB deadlocks": deadlocks,
    "unhandled errors": unhandled,
  };
  return { ...m, errors: m.errors + unhandled, extras };
}

// ------------------------------------------------------------------------------------- baseline

const evalsha = defineScenario({
  name: "seckill-evalsha",
  group: GROUP,
  baseline: true,
  description:
    `raw EVALSHA of lua/reserve-stock.lua (the KEYS/ARGV reserve() builds) via @upstash/redis createScript → Upstash-REST stand-in → redis-server, ` +
    `${SWARM} closed loops in their own bun process, ${USERS.toLocaleString("en-US")} buyers round robin, a fresh voucher of ${BASELINE_STOCK.toLocaleString("en-US")} units per round; ` +
    "every call reaches Redis, also after the sell-out; orders/s = first → last successful call",
  async setup(ctx) {
    const stack = await seckillStack(ctx);
    const app = await startAppServer(stack);
    let round = 0;
    return {
      kind: "run",
      async run(opts) {
        const stock = opts.warmup ? WARM_STOCK : BASELINE_STOCK;
        const now = Date.now();
        const cfg: SeckillConfig = {
          voucherId: ++baselineVoucher,
          shopId: SHOPS.evalsha,
          initialStock: stock,
          buckets: 1,
          dailyLimit: 0,
          beginMs: now - 3600_000,
          endMs: now + 6 * 3600_000,
          payValue: 8000,
        };
        await loadSeckillIntoRedis(stack.deps, cfg);
        const rest0 = stack.rest();
        const r = await app.ask<{ measurement: Measurement; sold: number; saleMs: number }>(
          {
            type: "evalsha-loop",
            durationMs: opts.durationMs,
            concurrency: SWARM,
            cfg,
            userBase: USER_BASE,
            users: USERS,
          },
          opts.durationMs + 25_000,
        );
        const d = restDelta(rest0, stack.rest());
        const m = r.measurement;

        const stockKey = keys.seckill.stock(cfg.shopId, cfg.voucherId, 0);
        const buyersKey = keys.seckill.buyers(cfg.shopId, cfg.voucherId);
        const [buyers, left] = (await Promise.all([
          stack.raw.send("SCARD", [buyersKey]),
          stack.raw.send("GET", [stockKey]),
        ])) as [number, string | null];
        if (buyers !== r.sold || buyers + Number(left ?? 0) !== stock) {
          throw new Error(
            `seckill-evalsha: ${r.sold} calls took a unit, Redis has ${buyers} buyers and ${left} units left of ${stock}`,
          );
        }
        // The baseline's reservations are never written anywhere: drop its keys.
        await stack.raw.send("DEL", [
          keys.seckill.meta(cfg.shopId, cfg.voucherId),
          stockKey,
          buyersKey,
          keys.seckill.outbox(cfg.shopId),
          keys.seckill.outboxDue(cfg.shopId),
        ]);
        await stack.raw.send("SREM", [keys.seckill.active(), `${cfg.shopId}:${cfg.voucherId}`]);
        if (!opts.warmup) {
          round++;
          ctx.log(
            `  seckill-evalsha #${round}: ${formatInt(r.sold)}/${formatInt(stock)} sold in ${r.saleMs.toFixed(0)} ms, ${formatInt(m.requests)} calls, ` +
              `${formatInt(d.requests)} REST trips, ${formatInt(d.commands)} commands`,
          );
        }
        m.extras = {
          sold: r.sold,
          oversell: Math.max(0, r.sold - stock),
          "orders/s": perSecond(r.sold, r.saleMs),
          "REST trips/req": d.requests / m.requests,
          "Redis cmds/req": d.commands / m.requests,
        };
        return m;
      },
      teardown: app.stop,
    };
  },
});

// ---------------------------------------------------------------------------------------- burst

/** Buyers (and units) of a burst round; of the warm-up. */
const BURST = 10_000;
const WARM_BURST = 2_000;
/** wrk's -d for a burst: an upper bound (the runner stops wrk once Redis holds every buyer). */
const BURST_MAX_S = 20;

const burst = defineScenario({
  name: "seckill-burst-10k",
  group: GROUP,
  description:
    `${BURST.toLocaleString("en-US")} orders reserved in one burst: POST /api/voucher-order/seckill/{id} on the app, ${SWARM} wrk connections, distinct buyers (the swarm script: ${USERS.toLocaleString("en-US")} sessions round robin), ` +
    `a voucher of ${BURST.toLocaleString("en-US")} units (one stock key), wrk stopped (SIGINT) as soon as Redis holds every buyer; rps = ${BURST.toLocaleString("en-US")} ÷ (first reservation → the ${BURST.toLocaleString("en-US")}th row in MySQL), ` +
    `"burst→MySQL s" that time; p50/p99 = wrk's request latency; "reserve s" = first → last reservation (order-id timestamps)`,
  async setup(ctx) {
    const stack = await seckillStack(ctx);
    const app = await startAppServer(stack);
    try {
      await smokeTest(stack, app, SHOPS.burst, 1);
    } catch (e) {
      await app.stop();
      throw e;
    }
    let round = 0;
    return {
      kind: "run",
      run: (opts) => burstRound(ctx, stack, app, opts.warmup ? WARM_BURST : BURST, opts.warmup ? 0 : ++round),
      teardown: app.stop,
    };
  },
});

async function burstRound(
  ctx: BenchContext,
  stack: SeckillStack,
  app: AppServer,
  n: number,
  round: number,
): Promise<Measurement> {
  const cfg = await stack.newVoucher({ shopId: SHOPS.burst, stock: n, buckets: 1 });
  const url = `${app.url}/api/voucher-order/seckill/${cfg.voucherId}`;
  assertLoopback(url);
  await uncountedCpu(() => qstashQuiet(stack, app, 10_000));
  const p0 = await app.ask<PipelineStats>({ type: "pipeline-stats", reset: true });
  const dl0 = await innodbDeadlocks(stack);
  const rest0 = stack.rest();
  const q0 = stack.qstash();

  // Polled directly while the burst runs and after: Redis buyers (every buyer served → stop wrk,
  // whose main thread would otherwise sleep out -d) and MySQL (when did the n-th row land?).
  const buyersKey = keys.seckill.buyers(cfg.shopId, cfg.voucherId);
  const stopWrk = new AbortController();
  let allAt = Number.NaN;
  let have = 0;
  let polling = true;
  let stopping = false;
  const poll = (async () => {
    const deadline = performance.now() + BURST_MAX_S * 1000 + DRAIN_TIMEOUT_MS;
    while (polling && performance.now() < deadline) {
      if (!stopping) {
        // During the sale: only the buyers, every ~5 ms; wrk is stopped at the sell-out.
        if (Number(await stack.raw.send("SCARD", [buyersKey])) >= n) {
          stopping = true;
          stopWrk.abort();
        }
        await sleep(5);
        continue;
      }
      have = (await stack.mysqlCounts(cfg.voucherId)).orders;
      if (have >= n) {
        allAt = Date.now();
        return;
      }
      await sleep(20);
    }
  })();
  let out: string;
  try {
    out = await execWrk(
      [
        `-t${ctx.threads}`,
        `-c${SWARM}`,
        `-d${BURST_MAX_S}s`,
        "--latency",
        "--timeout",
        "5s",
        "-s",
        SWARM_LUA,
        url,
        "--",
        stack.tokensFile,
      ],
      BURST_MAX_S,
      stopWrk.signal,
    );
  } catch (e) {
    polling = false;
    await poll;
    throw e;
  } finally {
    stopWrk.abort();
  }
  const m = parseWrkOutput(out);
  const b = parseSwarmLine(out);
  await uncountedCpu(async () => {
    await poll;
    if (Number.isNaN(allAt))
      throw new Error(
        `seckill-burst-10k: ${have} of ${n} orders in MySQL after ${BURST_MAX_S} s + ${DRAIN_TIMEOUT_MS / 1000} s`,
      );
    await qstashQuiet(stack, app, 15_000);
  });
  const p2 = await app.ask<PipelineStats>({ type: "pipeline-stats" });
  const dl2 = await innodbDeadlocks(stack);
  const rest2 = stack.rest();
  const q2 = stack.qstash();
  const db = await stack.mysqlCounts(cfg.voucherId);
  const [buyers, outbox] = (await Promise.all([
    stack.raw.send("SCARD", [keys.seckill.buyers(cfg.shopId, cfg.voucherId)]),
    stack.raw.send("HLEN", [keys.seckill.outbox(cfg.shopId)]),
  ])) as [number, number];
  const problems: string[] = [];
  // wrk may miss the last answers (stopped by SIGINT at the sell-out): Redis decides.
  if (b.successes > n || buyers !== n) problems.push(`${b.successes} successes and ${buyers} buyers for ${n} units`);
  if (db.orders !== n || db.stock !== 0) problems.push(`MySQL has ${db.orders} orders, stock ${db.stock}`);
  if (outbox !== 0) problems.push(`${outbox} reservations left in the outbox`);
  if (b.other > 0) problems.push(`${b.other} answers were neither success, SOLD_OUT nor DUPLICATE_ORDER`);
  if (problems.length) throw new Error(`seckill-burst-10k: ${problems.join("; ")}`);

  if (p2.firstReserveAt === null || p2.lastReserveAt === null)
    throw new Error("seckill-burst-10k: the app sent no reservation");
  const firstAt = p2.firstReserveAt;
  const lastAt = p2.lastReserveAt;
  const totalS = (allAt - firstAt) / 1000;
  const published = q2.published - q0.published;
  const failed = q2.failedAttempts - q0.failedAttempts;
  const conflicts =
    p2.lockConflicts.retried + p2.lockConflicts.exhausted - (p0.lockConflicts.retried + p0.lockConflicts.exhausted);
  const unhandled = unhandledErrors(p2);
  const all = restDelta(rest0, rest2);
  const writerCmds = writerRedisCommands(p2);
  if (round > 0) {
    ctx.log(
      `  seckill-burst-10k #${round}: ${formatInt(n)} reservations in ${((lastAt - firstAt) / 1000).toFixed(2)} s (wrk ${formatInt(m.requests)} answers, p50 ${m.p50Ms.toFixed(0)} ms), ` +
        `first reservation → ${formatInt(n)}th row in MySQL ${totalS.toFixed(2)} s (${((allAt - lastAt) / 1000).toFixed(2)} s after the last reservation); ` +
        `${p2.drains} drain deliveries, ${p2.orderGroups.closePublishes - p0.orderGroups.closePublishes} closes; Redis ${formatInt(all.commands)} cmds in all, ${writerCmds} writer-side; ` +
        `QStash ${published} published / ${failed} failed attempts; lock conflicts ${conflicts}, InnoDB deadlocks ${dl2 - dl0}, unhandled errors ${unhandled}`,
    );
    if (p2.lastErrors.length) ctx.log(`  app errors: ${p2.lastErrors.join(" | ")}`);
  }
  return {
    ...m,
    requests: n,
    errors: m.errors + unhandled,
    durationS: totalS,
    rps: n / totalS,
    extras: {
      "burst→MySQL s": totalS,
      "reserve s": (lastAt - firstAt) / 1000,
      sold: buyers,
      oversell: Math.max(0, Math.max(b.successes, buyers, db.orders) - n),
      "writer Redis cmds/1k orders": (writerCmds / n) * 1000,
      "QStash msgs/1k orders": ((published + failed) / n) * 1000,
      "lock conflicts": conflicts,
      "InnoDB deadlocks": dl2 - dl0,
      "unhandled errors": unhandled,
    },
  };
}

// ----------------------------------------------------------------------------------- lone order

/** Lone orders per measured round (one at a time, each on a quiet stack). */
const LONE = 3;

const lone = defineScenario({
  name: "seckill-lone-order",
  group: GROUP,
  description:
    `one POST /api/voucher-order/seckill/{id} on a quiet stack (QStash idle), sent at a random moment of the 1 s drain window, → its row in MySQL (polled directly every 5 ms); ` +
    `${LONE} per round, one after the other; p50/p99 = reservation → row in MySQL, rps = 1 ÷ the round's mean of that (orders/s of a lone buyer), ` +
    `"→MySQL ms" = that mean, "notBefore wait ms" = reservation → the drain's delivery`,
  async setup(ctx) {
    const stack = await seckillStack(ctx);
    const app = await startAppServer(stack);
    const tokens = (await Bun.file(stack.tokensFile).text()).split("\n").filter(Boolean);
    let next = 0;
    let round = 0;
    return {
      kind: "run",
      async run(opts) {
        const count = opts.warmup ? 1 : LONE;
        const cfg = await stack.newVoucher({ shopId: SHOPS.lone, stock: count, buckets: 1 });
        const url = `${app.url}/api/voucher-order/seckill/${cfg.voucherId}`;
        assertLoopback(url);
        const lat: number[] = [];
        const waits: number[] = [];
        let unhandled = 0;
        for (let i = 0; i < count; i++) {
          await uncountedCpu(() => qstashQuiet(stack, app, 15_000));
          await app.ask<PipelineStats>({ type: "pipeline-stats", reset: true });
          // A random phase: right after a quiet check the clock sits just past a window boundary.
          await sleep(Math.random() * 1000);
          const token = tokens[next++ % tokens.length]!;
          const t0 = Date.now();
          const res = await fetch(url, {
            method: "POST",
            headers: { authorization: token },
            signal: AbortSignal.timeout(5000),
          });
          const body = (await res.json()) as { success?: boolean; data?: string };
          if (!body.success || typeof body.data !== "string")
            throw new Error(`seckill-lone-order: reservation failed: ${res.status} ${JSON.stringify(body)}`);
          const id = body.data;
          await waitUntil(
            () => `order ${id} in MySQL`,
            async () =>
              ((await stack.mysql.query("SELECT 1 FROM tb_voucher_order WHERE id = ?", [id]))[0] as unknown[])
                .length === 1,
            10_000,
            5,
          );
          lat.push(Date.now() - t0);
          // Until the follow-up drain has come and gone: the order's whole cost, and a quiet stack after it.
          await uncountedCpu(() => qstashQuiet(stack, app, 15_000));
          const p = await app.ask<PipelineStats>({ type: "pipeline-stats" });
          waits.push((p.firstDrainAt ?? Number.NaN) - t0);
          unhandled += unhandledErrors(p);
        }
        const mean = lat.reduce((a, b) => a + b, 0) / lat.length;
        const sorted = [...lat].sort((a, b) => a - b);
        if (!opts.warmup)
          ctx.log(
            `  seckill-lone-order #${++round}: reservation → MySQL ${lat.map((x) => `${x} ms`).join(", ")} (wait for the drain ${waits.map((x) => x.toFixed(0)).join(", ")} ms)`,
          );
        return {
          requests: count,
          errors: unhandled,
          durationS: (mean * count) / 1000,
          rps: 1000 / mean,
          p50Ms: sorted[Math.floor((sorted.length - 1) / 2)]!,
          p99Ms: sorted[sorted.length - 1]!,
          extras: {
            "→MySQL ms": mean,
            "notBefore wait ms": waits.reduce((a, b) => a + b, 0) / waits.length,
            "unhandled errors": unhandled,
          },
        };
      },
      teardown: app.stop,
    };
  },
});

// ------------------------------------------------------------------------------------ phases

/**
 * seckill-sale: the on-sale phase alone. A fresh voucher of SALE_STOCK (= USERS) units per round,
 * so every attempt of the window is a first-time buyer with stock left (the swarm's tokens round
 * robin from the start of the list); wrk is stopped the moment the stock is gone, should it be
 * gone before the window ends, so only the few requests in flight then see SOLD_OUT.
 */
const SALE_STOCK = USERS;

const sale = defineScenario({
  name: "seckill-sale",
  group: GROUP,
  description:
    `the on-sale phase alone: POST /api/voucher-order/seckill/{id} on the app (own bun process), ${SWARM} wrk connections, ${USERS.toLocaleString("en-US")} buyers' sessions round robin ` +
    `(more than SESSION_CACHE_MAX 10,000: sessions are verified by signature and confirmed in batches), a fresh voucher of ${SALE_STOCK.toLocaleString("en-US")} units per round ` +
    "so every attempt is a first-time buyer with stock left, wrk stopped at the sell-out; the writer drains concurrently and MySQL is checked after each round. " +
    '"sale: Redis cmds/attempt" = every command the app\'s own Redis client sent for the round (session sync, UV, cache metrics, id lease, order index, ' +
    'the reservations, and the writer\'s claims/acks until QStash is quiet) ÷ attempts the app served; "reserve EVALSHA/attempt" = the response path\'s reserve-stock.lua, "other" the rest',
  async setup(ctx) {
    const stack = await seckillStack(ctx);
    const app = await startAppServer(stack);
    try {
      await smokeTest(stack, app, SHOPS.sale, 1);
    } catch (e) {
      await app.stop();
      throw e;
    }
    let round = 0;
    return {
      kind: "run",
      run: (opts) =>
        swarmRound(
          ctx,
          stack,
          app,
          {
            name: "seckill-sale",
            shopId: SHOPS.sale,
            buckets: 1,
            round: opts.warmup ? 0 : ++round,
            stock: SALE_STOCK,
            stopAtSoldOut: true,
          },
          opts,
        ),
      teardown: app.stop,
    };
  },
});

/** Warm sessions of the sold-out and hello rows (within SESSION_CACHE_MAX). */
const WARM_TOKENS = 2_000;
const TOKENS_LUA = join(import.meta.dir, "../wrk/rotate-tokens.lua");

/** One wrk window of SWARM connections with rotate-tokens.lua (POST, WARM_TOKENS sessions). */
async function tokensWindow(
  ctx: BenchContext,
  url: string,
  tokensFile: string,
  durationMs: number,
): Promise<Measurement> {
  assertLoopback(url);
  const seconds = Math.max(1, Math.round(durationMs / 1000));
  const out = await execWrk(
    [
      `-t${ctx.threads}`,
      `-c${SWARM}`,
      `-d${seconds}s`,
      "--latency",
      "--timeout",
      "5s",
      "-s",
      TOKENS_LUA,
      url,
      "--",
      tokensFile,
      "POST",
    ],
    seconds,
  );
  return parseWrkOutput(out);
}

const soldOut = defineScenario({
  name: "seckill-sold-out",
  group: GROUP,
  ratioTo: [{ scenario: "seckill-hello", column: "÷ hello" }],
  description:
    `the sold-out phase alone: POST /api/voucher-order/seckill/{id} on the app (own bun process), ${SWARM} wrk connections, ${WARM_TOKENS.toLocaleString("en-US")} warm sessions round robin ` +
    "(wrk/rotate-tokens.lua), a voucher sold out before the first window (its one unit bought in setup); every answer is SOLD_OUT from the isolate's sold-out memo " +
    '(one EVALSHA per SOLD_OUT_MEMO_MS). "sold out: Redis cmds/attempt" = every command the app\'s Redis client sent in the window (memo refresh, session sync, UV, metrics) ÷ attempts served; ' +
    '"÷ hello" = rps ÷ seckill-hello\'s in the same round',
  async setup(ctx) {
    const stack = await seckillStack(ctx);
    const app = await startAppServer(stack);
    let url: string;
    let voucherId: number;
    let tokensFile: string;
    try {
      tokensFile = await warmTokensFile(stack, WARM_TOKENS);
      const cfg = await stack.newVoucher({ shopId: SHOPS.soldOut, stock: 1, buckets: 1 });
      voucherId = cfg.voucherId;
      url = `${app.url}/api/voucher-order/seckill/${cfg.voucherId}`;
      await sellTheOneUnit(stack, url, "seckill-sold-out", 5000);
      await waitUntil(
        () => "the sold-out voucher's one order in MySQL",
        async () => (await stack.mysqlCounts(voucherId).then((c) => c.orders)) === 1,
        10_000,
        50,
      );
      await qstashQuiet(stack, app, 15_000);
    } catch (e) {
      await app.stop();
      throw e;
    }
    const buyersKey = keys.seckill.buyers(SHOPS.soldOut, voucherId);
    let round = 0;
    return {
      kind: "run",
      async run(opts) {
        const p0 = await app.ask<PipelineStats>({ type: "pipeline-stats", reset: true });
        const m = await tokensWindow(ctx, url, tokensFile, opts.durationMs);
        const p1 = await app.ask<PipelineStats>({ type: "pipeline-stats" });
        const buyers = Number(await stack.raw.send("SCARD", [buyersKey]));
        if (buyers !== 1) throw new Error(`seckill-sold-out: ${buyers} buyers of a voucher that had 1 unit`);
        const cmds = redisTotal(p1.redis);
        const unhandled = unhandledErrors(p1);
        void p0;
        if (!opts.warmup) {
          ctx.log(
            `  seckill-sold-out #${++round}: ${formatInt(p1.served)} attempts served (wrk ${formatInt(m.requests)}), app-client Redis ${formatInt(cmds)} cmds: ${redisSummary(p1.redis)}; ` +
              `unhandled errors ${unhandled}`,
          );
        }
        return {
          ...m,
          errors: m.errors + unhandled,
          extras: {
            "p99÷p50": m.p99Ms / m.p50Ms,
            "sold out: Redis cmds/attempt": p1.served > 0 ? cmds / p1.served : Number.NaN,
            "unhandled errors": unhandled,
          },
        };
      },
      teardown: app.stop,
    };
  },
});

const hello = defineScenario({
  name: "seckill-hello",
  group: GROUP,
  description:
    `POST / on a Hono hello-world (servers/hono-hello.ts, own bun process), ${SWARM} wrk connections, the same wrk script and tokens as seckill-sold-out: ` +
    'the denominator of its "÷ hello" column (its own ratio is against the raw EVALSHA, not meaningful)',
  async setup(ctx) {
    const stack = await seckillStack(ctx);
    const tokensFile = await warmTokensFile(stack, WARM_TOKENS);
    const server = await spawnBunServer({
      script: join(import.meta.dir, "../servers/hono-hello.ts"),
      env: { HELLO_METHODS: "GET,POST" },
    });
    try {
      const res = await fetch(`${server.url}/`, { method: "POST", signal: AbortSignal.timeout(5000) });
      const text = await res.text();
      if (res.status !== 200 || text !== "Hello, World!")
        throw new Error(`hono-hello answered POST / with ${res.status} ${text.slice(0, 200)}`);
    } catch (e) {
      await server.stop();
      throw e;
    }
    return {
      kind: "run",
      run: (opts) => tokensWindow(ctx, `${server.url}/`, tokensFile, opts.durationMs),
      teardown: server.stop,
    };
  },
});

export default [evalsha, endpointScenario(1), endpointScenario(8), burst, lone, sale, soldOut, hello];

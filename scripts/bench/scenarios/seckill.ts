/**
 * Group "seckill": a buyer swarm against the real endpoint, POST /api/voucher-order/seckill/{id},
 * next to the Redis script it is built around, measured in the same rounds.
 *
 * Endpoint rows (seckill-endpoint, seckill-endpoint-b8): the real app in its own bun process
 * (servers/app-seckill.ts), SWARM (200) wrk connections whatever --connections says, the buyers'
 * tokens round robin from USERS (20,000) sessions (wrk/seckill-swarm.lua), so the first 20,000
 * requests of a round come from distinct users. Every round (and the warm-up) sells a fresh
 * voucher of STOCK units — far less than the demand — so each round has two phases:
 *   sale       until the stock is gone: session read + reserve-stock.lua + QStash publish;
 *   sold out   the rest of the window: the session read still goes to Redis, then the isolate's
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
 * Cost model (what the counters confirm): a sold unit costs 3 Redis commands in 3 round trips —
 * the session's HMGET and EXPIRE (requireUser issues them together, but @upstash/redis's
 * auto-pipeline keeps separate read and write pipelines, so they travel apart) and the EVALSHA —
 * plus the writer's ack (HDEL + ZREM, one /multi-exec), and 2 QStash messages (write + close).
 * A request after the sell-out costs the 2 session commands (the memo spares the EVALSHA). The UV
 * middleware adds PFADD + EXPIRE on a buyer's first request of the day per isolate; the warm-up
 * reaches the buyers every round starts with, so measured rounds see repeat visitors.
 *
 * Extra columns (from the stand-ins' counters, read around the round):
 *   sold / oversell       units sold (Redis buyers) / max(wrk successes, buyers, MySQL orders) − stock
 *   orders/s              sale-phase rate, see above
 *   REST trips/req        Upstash-REST HTTP requests (= Redis round trips) per request or call,
 *                         the writer's acks (/multi-exec) excluded; < 1 means auto-pipelining
 *                         batched concurrent requests' commands into shared round trips
 *   Redis cmds/req        Redis commands per request or call, writer acks excluded
 *   Redis cmds/1k orders  commands of the sale phase (start → the poller sees stock 0) plus every
 *                         writer ack of the round, per 1,000 units sold; the sold-out phase adds
 *                         "Redis cmds/req" per further request on top (a function of demand)
 *   QStash msgs/1k orders messages published per 1,000 units sold (write + delayed close)
 */
import { join } from "node:path";
import { keys } from "../../../src/redis/keys.ts";
import { IdGenerator } from "../../../src/redis/ids.ts";
import { loadSeckillIntoRedis, type SeckillConfig } from "../../../src/services/seckill/config.ts";
import { ACK_COMMANDS, restDelta, seckillStack, startAppServer, SWARM, USER_BASE, USERS, waitUntil, type AppServer, type SeckillStack } from "../fixtures/seckill-stack.ts";
import { uncountedCpu } from "../lib/cpu.ts";
import { assertLoopback, formatInt, sleep } from "../lib/util.ts";
import { execWrk, parseWrkOutput } from "../lib/wrk.ts";
import { defineScenario, type BenchContext, type Extras, type Measurement, type RunOptions, type Scenario } from "../types.ts";
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
const SHOPS = { evalsha: 101, b1: 102, b8: 103 } as const;
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
  return { successes: Number(m[1]), soldOut: Number(m[2]), duplicate: Number(m[3]), other: Number(m[4]), minId: m[5]!, maxId: m[6]! };
}

/** Milliseconds between the first and the last of `n` sold units, from their order ids. */
function saleMsFromIds(minId: string, maxId: string): number {
  if (!minId || !maxId) return Number.NaN;
  return IdGenerator.timeOf(BigInt(maxId)) - IdGenerator.timeOf(BigInt(minId));
}

const perSecond = (units: number, ms: number): number => (units >= 2 && ms > 0 ? ((units - 1) * 1000) / ms : Number.NaN);

async function stockLeft(stack: SeckillStack, stockKeys: string[]): Promise<number> {
  const vals = (await stack.raw.send("MGET", stockKeys)) as (string | null)[];
  return vals.reduce((s, v) => s + Number(v ?? 0), 0);
}

/** Polls the stock directly in redis-server every ~2 ms; remembers when it first fell and hit 0. */
function stockPoller(stack: SeckillStack, stockKeys: string[], initial: number) {
  const t0 = performance.now();
  const state = { firstSaleMs: Number.NaN, soldOutMs: Number.NaN, atSoldOut: null as UpstashRestStats | null, error: null as unknown };
  let running = true;
  const loop = (async () => {
    try {
      while (running) {
        const left = await stockLeft(stack, stockKeys);
        const t = performance.now() - t0;
        if (left < initial && Number.isNaN(state.firstSaleMs)) state.firstSaleMs = t;
        if (left <= 0) {
          state.soldOutMs = t;
          state.atSoldOut = stack.rest();
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
      "rps/p50/p99 over the whole window (sale, then sold out); orders/s = sale phase only; the writer drains through QStash concurrently and MySQL is checked after each round. " +
      "Cost per order: 3 Redis commands in 3 round trips (session HMGET, session EXPIRE — the SDK pipelines reads and writes apart — and EVALSHA), 2 more for the writer's ack " +
      "(HDEL + ZREM in one MULTI), 2 QStash messages (write + delayed close) — ≈ 5,000 commands and 2,000 messages per 1,000 orders; " +
      "each request after the sell-out adds the 2 session commands (+ UV PFADD + EXPIRE on a buyer's first request of the day per isolate)",
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
    const res = await fetch(url, { method: "POST", headers: { authorization: token }, signal: AbortSignal.timeout(5000) });
    bodies.push(`${res.status} ${await res.text()}`);
  }
  const wins = bodies.filter((b) => b.startsWith('200 {"success":true,"data":"')).length;
  const last = bodies[bodies.length - 1]!;
  if (wins !== buckets || !last.includes('"SOLD_OUT"')) throw new Error(`smoke test: expected ${buckets} success(es) then SOLD_OUT, got\n${bodies.join("\n")}`);
  await waitUntil(
    () => `the smoke test's ${buckets} order(s) in MySQL (QStash → ${app.url}/internal/orders/write)`,
    async () => (await stack.mysqlCounts(cfg.voucherId)).orders === buckets,
    10_000,
    50,
  );
}

async function swarmRound(
  ctx: BenchContext,
  stack: SeckillStack,
  app: AppServer,
  row: { name: string; shopId: number; buckets: number; round: number },
  opts: RunOptions,
): Promise<Measurement> {
  const stock = opts.warmup ? WARM_STOCK : STOCK;
  const cfg = await stack.newVoucher({ shopId: row.shopId, stock, buckets: row.buckets });
  const stockKeys = Array.from({ length: row.buckets }, (_, i) => keys.seckill.stock(row.shopId, cfg.voucherId, i));
  const url = `${app.url}/api/voucher-order/seckill/${cfg.voucherId}`;
  assertLoopback(url);
  // The warm-up runs one second longer than a measured window (not --warmup's length): the buyers it reaches are the
  // ones every round starts with (wrk begins at the same tokens), so the app's per-isolate UV
  // "seen" entries exist for them and measured rounds are all alike (repeat visitors).
  const seconds = Math.max(1, Math.round((opts.warmup ? ctx.durationMs + 1000 : opts.durationMs) / 1000));

  const rest0 = stack.rest();
  const q0 = stack.qstash();
  const poller = stockPoller(stack, stockKeys, stock);
  let out: string;
  try {
    out = await execWrk([`-t${ctx.threads}`, `-c${SWARM}`, `-d${seconds}s`, "--latency", "--timeout", "5s", "-s", SWARM_LUA, url, "--", stack.tokensFile], seconds);
  } finally {
    await poller.stop();
  }
  const rest1 = stack.rest();
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
      () => `the writer: ${last.orders} of ${last.buyers} orders in MySQL, ${last.outbox} reservations still in the outbox`,
      async () => {
        const [buyers, outbox] = (await Promise.all([stack.raw.send("SCARD", [buyersKey]), stack.raw.send("HLEN", [outboxKey])])) as [number, number];
        last = { buyers, outbox, orders: (await stack.mysqlCounts(cfg.voucherId)).orders };
        return outbox === 0 && last.orders === buyers;
      },
      DRAIN_TIMEOUT_MS,
      50,
    ),
  );
  const drainS = (performance.now() - tDrain) / 1000;
  const rest2 = stack.rest();
  const q2 = stack.qstash();

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
  const swarmTrips = win.requests - win.multi;
  const swarmCmds = win.commands - ACK_COMMANDS * win.multi;
  const writerCmds = ACK_COMMANDS * all.multi;
  const saleDelta = restDelta(rest0, sale.atSoldOut ?? rest1);
  const saleCmds = saleDelta.commands - ACK_COMMANDS * saleDelta.multi;
  const published = q2.published - q0.published;
  const saleMs = saleMsFromIds(swarm.minId, swarm.maxId);

  if (!opts.warmup) {
    const soldOut = Number.isNaN(sale.soldOutMs) ? "not sold out in the window" : `sold out ${sale.soldOutMs.toFixed(0)} ms into the window (poller; first sale at ${sale.firstSaleMs.toFixed(0)} ms)`;
    ctx.log(
      `  ${row.name} #${row.round}: ${formatInt(sold)}/${formatInt(stock)} sold, ${saleMs.toFixed(0)} ms first→last order id, ${soldOut}; ` +
        `wrk ${formatInt(m.requests)} answers (${formatInt(swarm.successes)} ok, ${formatInt(swarm.soldOut)} SOLD_OUT, ${formatInt(swarm.duplicate)} DUPLICATE); ` +
        `Redis: ${formatInt(saleCmds)} cmds in the sale, ${formatInt(swarmCmds)} swarm cmds / ${formatInt(swarmTrips)} trips in the window, ${formatInt(writerCmds)} writer cmds, ` +
        `${formatInt(all.commands)} in all (${((all.commands / Math.max(1, sold)) * 1000).toFixed(0)} per 1k orders incl. the sold-out phase); ` +
        `QStash ${formatInt(published)} published, writer done ${drainS.toFixed(1)} s after the window; MySQL ${formatInt(db.orders)} orders, stock ${db.stock}`,
    );
  }
  if (sale.error) ctx.log(`  ${row.name}: stock poller failed: ${String(sale.error)}`);

  const extras: Extras = {
    sold,
    oversell,
    "orders/s": perSecond(swarm.successes, saleMs),
    "REST trips/req": swarmTrips / m.requests,
    "Redis cmds/req": swarmCmds / m.requests,
    "Redis cmds/1k orders": sold > 0 ? ((saleCmds + writerCmds) / sold) * 1000 : Number.NaN,
    "QStash msgs/1k orders": sold > 0 ? (published / sold) * 1000 : Number.NaN,
  };
  return { ...m, extras };
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
          { type: "evalsha-loop", durationMs: opts.durationMs, concurrency: SWARM, cfg, userBase: USER_BASE, users: USERS },
          opts.durationMs + 25_000,
        );
        const d = restDelta(rest0, stack.rest());
        const m = r.measurement;

        const stockKey = keys.seckill.stock(cfg.shopId, cfg.voucherId, 0);
        const buyersKey = keys.seckill.buyers(cfg.shopId, cfg.voucherId);
        const [buyers, left] = (await Promise.all([stack.raw.send("SCARD", [buyersKey]), stack.raw.send("GET", [stockKey])])) as [number, string | null];
        if (buyers !== r.sold || buyers + Number(left ?? 0) !== stock) {
          throw new Error(`seckill-evalsha: ${r.sold} calls took a unit, Redis has ${buyers} buyers and ${left} units left of ${stock}`);
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

export default [evalsha, endpointScenario(1), endpointScenario(8)];

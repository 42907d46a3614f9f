/**
 * Group "writer": how fast the batched order writer turns reservations into MySQL rows, next to
 * the fastest way to put the same number of rows into the same table, measured in the same rounds.
 *
 * writer-drain / writer-drain-delivered: each round creates a voucher of ORDERS units (MySQL +
 * Redis, like the operator route), then makes ORDERS real reservations: lua/reserve-stock.lua with
 * exactly the KEYS/ARGV reserve() builds (src/services/seckill/reserve.ts), one per buyer, sent
 * straight to redis-server (set-up, uncounted), so the shop's outbox holds ORDERS entries. Then it
 * announces the drain the way a reserving isolate does (OrderGroups → drainMessage in
 * src/queue/messages.ts: one message per shop and one-second window, notBefore = the window's end,
 * deduplication id naming the window), published through the local QStash, which signs and
 * delivers it to the app's drain route, ORDER_DRAIN_PATH (servers/app-seckill.ts, own bun process). The
 * writer (drainShop) claims groups of ORDER_GROUP_MAX from the outbox, writes each in one MySQL
 * transaction (multi-row INSERT IGNORE + one stock update, via @planetscale/database →
 * PlanetScale-HTTP stand-in → MariaDB), acks each group with one command, publishes one delayed
 * close per group and a follow-up drain for the next window. MySQL is polled directly every 10 ms.
 *
 *   writer-drain            rps = ORDERS ÷ (announcement → last row in MySQL): what a sale sees,
 *                           including the wait for the window's end (QStash delivers the drain no
 *                           earlier than notBefore, whole seconds, so on average ~0.5 s; the
 *                           announcement is made at whatever moment the round starts);
 *                           p50 = announcement → first row, p99 = announcement → last row.
 *   writer-drain-delivered  the same round, rps = ORDERS ÷ (first drain delivery arriving at the
 *                           app → last row): the writer's own speed; p50/p99 from the delivery.
 * Both rows run their own rounds (own vouchers), interleaved with the baseline like any row. After
 * the last row the round waits (uncounted CPU) until the local QStash is quiet — the follow-up
 * drain delivered and its chain ended — so the counters cover everything those orders caused; it
 * then checks MySQL orders = ORDERS, stock 0 and an empty outbox.
 *
 * writer-insert (baseline): INSERT_ROWS rows into tb_voucher_order as multi-row INSERTs of BATCH
 * rows, one statement after the other (autocommit), through the app's own @planetscale/database
 * client and the same stand-in, from the app-seckill child over IPC; rps = rows/s, p50/p99 = one
 * BATCH-row statement.
 *
 * Extra columns: "DB trips/order" (PlanetScale-HTTP requests per order/row); for the drains
 * "writer Redis cmds/1k orders" (Upstash-REST commands of the round — claims, acks, hand-backs;
 * nothing else talks to Redis through the stand-in then — per 1,000 orders, checked against the
 * app-side count), "QStash msgs/1k orders" (messages published for the round — the announcement,
 * follow-up drains, closes — plus failed delivery attempts, i.e. retries, per 1,000 orders),
 * "notBefore wait ms" (announcement → first delivery), "lock conflicts" (the app's
 * deps.isolate.orderGroups.lockConflicts, retried + exhausted), "InnoDB deadlocks" (MariaDB
 * Innodb_deadlocks delta) and "unhandled errors" (the app's "unhandled error" log lines).
 */
import type { Config } from "../../../src/env.ts";
import { drainMessage, DRAIN_WINDOW_MS, ORDER_DRAIN_PATH } from "../../../src/queue/messages.ts";
import { keys } from "../../../src/redis/keys.ts";
import { luaSources } from "../../../src/redis/scripts.ts";
import { reserveArgs, reserveKeys } from "../../../src/services/seckill/reserve.ts";
import { serviceDay } from "../../../src/util/time.ts";
import type { SeckillConfig } from "../../../src/services/seckill/config.ts";
import type { Reservation } from "../../../src/services/seckill/types.ts";
import {
  innodbDeadlocks,
  qstashQuiet,
  restDelta,
  seckillStack,
  startAppServer,
  unhandledErrors,
  USER_BASE,
  waitUntil,
  writerRedisCommands,
  type AppServer,
  type PipelineStats,
  type SeckillStack,
} from "../fixtures/seckill-stack.ts";
import { uncountedCpu } from "../lib/cpu.ts";
import { formatInt } from "../lib/util.ts";
import { defineScenario, type BenchContext, type Measurement, type RunOptions, type Scenario } from "../types.ts";

const GROUP = "writer";
/** Orders per measured round, and per warm-up round: at ~10k+ rows/s, 10,000 take long enough to time. */
const ORDERS = 10_000;
const WARM_ORDERS = 2_000;
/** Rows per round of the baseline (as many as a drain round writes), and per INSERT statement. */
const INSERT_ROWS = 10_000;
const BATCH = 500;
/** Each drain row has its own shop (hash tag, outbox, drain dedup ids), apart from the seckill group's. */
const SHOPS = { announced: 104, delivered: 106 } as const;
/** The baseline's voucher ids: no voucher row is needed for a bare INSERT; far above auto-increment ids. */
let insertVoucher = 800_000_000;
const DRAIN_TIMEOUT_MS = 25_000;

async function orderCount(stack: SeckillStack, voucherId: number): Promise<number> {
  const [rows] = await stack.mysql.query("SELECT COUNT(*) AS n FROM tb_voucher_order WHERE voucher_id = ?", [
    voucherId,
  ]);
  return Number((rows as { n: string | number }[])[0]!.n);
}

const insert = defineScenario({
  name: "writer-insert",
  group: GROUP,
  baseline: true,
  description:
    `${INSERT_ROWS.toLocaleString("en-US")} rows into tb_voucher_order as multi-row INSERTs of ${BATCH}, one after the other, via @planetscale/database → PlanetScale-HTTP stand-in → MariaDB ` +
    `(the app's client, in its own bun process); rps = rows/s, p50/p99 = one ${BATCH}-row statement`,
  async setup(ctx) {
    const stack = await seckillStack(ctx);
    const app = await startAppServer(stack);
    let round = 0;
    return {
      kind: "run",
      async run(opts) {
        const rows = opts.warmup ? WARM_ORDERS : INSERT_ROWS;
        const voucherId = ++insertVoucher;
        const ps0 = stack.planetscale().requests;
        const r = await app.ask<{ rows: number; ms: number; p50Ms: number; p99Ms: number }>(
          { type: "insert", voucherId, rows, batch: BATCH, userBase: USER_BASE },
          opts.durationMs + 25_000,
        );
        const trips = stack.planetscale().requests - ps0;
        const n = await orderCount(stack, voucherId);
        if (n !== rows) throw new Error(`writer-insert: MySQL has ${n} rows of ${rows}`);
        if (!opts.warmup)
          ctx.log(
            `  writer-insert #${++round}: ${formatInt(rows)} rows in ${r.ms.toFixed(0)} ms, ${trips} DB requests`,
          );
        const durationS = r.ms / 1000;
        return {
          requests: rows,
          errors: 0,
          durationS,
          rps: rows / durationS,
          p50Ms: r.p50Ms,
          p99Ms: r.p99Ms,
          extras: { "DB trips/order": trips / rows },
        };
      },
      teardown: app.stop,
    };
  },
});

function drainScenario(fromDelivery: boolean): Scenario {
  const name = fromDelivery ? "writer-drain-delivered" : "writer-drain";
  const shopId = fromDelivery ? SHOPS.delivered : SHOPS.announced;
  return defineScenario({
    name,
    group: GROUP,
    description:
      `${ORDERS.toLocaleString("en-US")} real reservations (reserve-stock.lua, reserve()'s KEYS/ARGV) in one shop's outbox, one drain announced as an isolate does ` +
      `(drainMessage: per shop and 1 s window, notBefore = window end, dedup id per window) through the local QStash to the app's ${ORDER_DRAIN_PATH} ` +
      "(own bun process: groups of ORDER_GROUP_MAX claimed in one command, one MySQL transaction per group — multi-row INSERT IGNORE + one stock update — one ack, one delayed close per group, a follow-up drain); " +
      (fromDelivery
        ? "rps = orders ÷ (first drain delivery → last row in MySQL): the writer's own speed; p50/p99 = delivery → first / last row"
        : "rps = orders ÷ (announcement → last row in MySQL), the wait for the window's end included; p50/p99 = announcement → first / last row") +
      "; counts cover the round until QStash is quiet (follow-up drains included)",
    async setup(ctx) {
      const stack = await seckillStack(ctx);
      const app = await startAppServer(stack);
      try {
        // A small drain end to end before anything is measured.
        await drainRound(ctx, stack, app, shopId, 10, false, 0);
      } catch (e) {
        await app.stop();
        throw e;
      }
      let round = 0;
      return {
        kind: "run",
        run: (opts: RunOptions) =>
          drainRound(
            ctx,
            stack,
            app,
            shopId,
            opts.warmup ? WARM_ORDERS : ORDERS,
            fromDelivery,
            opts.warmup ? 0 : ++round,
          ),
        teardown: app.stop,
      };
    },
  });
}

let reserveSha: string | undefined;

/** n reservations of one voucher into its shop's outbox, straight to redis-server (set-up: uncounted). */
async function reserveAll(stack: SeckillStack, cfg: SeckillConfig, n: number): Promise<void> {
  reserveSha ??= String(await stack.raw.send("SCRIPT", ["LOAD", luaSources.reserveStock]));
  // The bench app's limits: one address, no rate limit (servers/app-seckill.ts).
  const c = { ...stack.deps.config, SECKILL_USER_LIMIT: 0, SECKILL_IP_LIMIT: 0 };
  const ids = stack.deps.isolate.ids;
  const now = Date.now();
  const day = serviceDay(now, c.SERVICE_TIME_ZONE);
  for (let i = 0; i < n; i += 1000) {
    const batch: Promise<unknown>[] = [];
    for (let k = i; k < Math.min(n, i + 1000); k++) {
      const userId = USER_BASE + k + 1;
      const r: Reservation = {
        orderId: (await ids.next()).toString(),
        userId,
        voucherId: cfg.voucherId,
        shopId: cfg.shopId,
        reservedAt: now,
        amount: cfg.payValue,
      };
      const kk = reserveKeys(cfg, userId, "127.0.0.1", day, r.orderId);
      batch.push(stack.raw.send("EVALSHA", [reserveSha, String(kk.length), ...kk, ...reserveArgs(c, r)]));
    }
    const codes = (await Promise.all(batch)) as unknown[][];
    const bad = codes.filter((x) => Number(x[0]) !== 0).length;
    if (bad > 0)
      throw new Error(
        `reserve-stock.lua refused ${bad} of ${codes.length} reservations (first: ${JSON.stringify(codes.find((x) => Number(x[0]) !== 0))})`,
      );
  }
}

async function drainRound(
  ctx: BenchContext,
  stack: SeckillStack,
  app: AppServer,
  shopId: number,
  n: number,
  fromDelivery: boolean,
  round: number,
): Promise<Measurement> {
  const cfg = await stack.newVoucher({ shopId, stock: n, buckets: 1 });
  // Set-up, not the writer's work: kept out of "CPU µs/op".
  await uncountedCpu(() => reserveAll(stack, cfg, n));
  const outboxKey = keys.seckill.outbox(shopId);
  const queued = Number(await stack.raw.send("HLEN", [outboxKey]));
  if (queued !== n) throw new Error(`${n} reservations made, the outbox holds ${queued}`);
  // Nothing of an earlier round may still be on its way.
  await uncountedCpu(() => qstashQuiet(stack, app, 10_000));

  const p0 = await app.ask<PipelineStats>({ type: "pipeline-stats", reset: true });
  const dl0 = await innodbDeadlocks(stack);
  const rest0 = stack.rest();
  const q0 = stack.qstash();
  const ps0 = stack.planetscale().requests;

  // The announcement, as OrderGroups.runFlush sends it (with the bench app as PUBLIC_URL).
  const appConfig = { ...stack.deps.config, PUBLIC_URL: app.url } as Config;
  const announcedAt = Date.now();
  const t0 = performance.now();
  await stack.deps.queue.batchJSON([
    drainMessage({ config: appConfig }, shopId, Math.floor(announcedAt / DRAIN_WINDOW_MS)),
  ]);
  let firstRowAt = Number.NaN;
  let have = 0;
  await waitUntil(
    () => `${n} orders in MySQL (have ${have})`,
    async () => {
      have = await orderCount(stack, cfg.voucherId);
      if (have > 0 && Number.isNaN(firstRowAt)) firstRowAt = Date.now();
      return have >= n;
    },
    DRAIN_TIMEOUT_MS,
    10,
  );
  const lastRowAt = Date.now();
  const announceToLastS = (performance.now() - t0) / 1000;
  const psTrips = stack.planetscale().requests - ps0;
  // The follow-up drain comes one window later and ends the chain; its claim belongs to the round.
  await uncountedCpu(() => qstashQuiet(stack, app, 15_000));
  const p1 = await app.ask<PipelineStats>({ type: "pipeline-stats" });
  const dl1 = await innodbDeadlocks(stack);
  const q1 = stack.qstash();
  const redis = restDelta(rest0, stack.rest());
  const db = await stack.mysqlCounts(cfg.voucherId);
  const left = Number(await stack.raw.send("HLEN", [outboxKey]));
  if (db.orders !== n || db.stock !== 0 || left !== 0)
    throw new Error(
      `${fromDelivery ? "writer-drain-delivered" : "writer-drain"}: MySQL has ${db.orders} orders of ${n}, stock ${db.stock} (expected 0), ${left} left in the outbox`,
    );

  const firstDrainAt = p1.firstDrainAt ?? Number.NaN;
  const waitMs = firstDrainAt - announcedAt;
  const fromDeliveryS = (lastRowAt - firstDrainAt) / 1000;
  const published = q1.published - q0.published;
  const failed = q1.failedAttempts - q0.failedAttempts;
  const conflicts =
    p1.lockConflicts.retried + p1.lockConflicts.exhausted - (p0.lockConflicts.retried + p0.lockConflicts.exhausted);
  const appWriterCmds = writerRedisCommands(p1);
  const closes = p1.orderGroups.closePublishes - p0.orderGroups.closePublishes;
  const drainsPublished = p1.orderGroups.drainPublishes - p0.orderGroups.drainPublishes;
  if (round > 0) {
    ctx.log(
      `  ${fromDelivery ? "writer-drain-delivered" : "writer-drain"} #${round}: ${formatInt(n)} orders; announcement → delivery ${waitMs.toFixed(0)} ms, → first row ${(firstRowAt - announcedAt).toFixed(0)} ms, ` +
        `→ last row ${(announceToLastS * 1000).toFixed(0)} ms (${formatInt(n / announceToLastS)}/s; from delivery ${(fromDeliveryS * 1000).toFixed(0)} ms, ${formatInt(n / fromDeliveryS)}/s); ` +
        `${p1.drains} drain deliveries (${p1.drainErrors} failed, longest ${p1.p99Ms.toFixed(0)} ms); ${psTrips} DB requests; ` +
        `Redis ${redis.commands} cmds in ${redis.requests} requests (app: ${p1.writerRedis.claims} claims, ${p1.writerRedis.acks} acks, ${p1.writerRedis.handbacks} hand-backs, ${p1.writerRedis.evalFallbacks} EVAL fallbacks); ` +
        `QStash ${published} published (${closes} closes, ${drainsPublished} drains from the app + 1 announcement) / ${failed} failed attempts; ` +
        `lock conflicts ${conflicts}, InnoDB deadlocks ${dl1 - dl0}, unhandled errors ${unhandledErrors(p1)}`,
    );
    if (appWriterCmds !== redis.commands)
      ctx.log(
        `  note: the Upstash-REST stand-in saw ${redis.commands} commands, the app's writer-side count is ${appWriterCmds}`,
      );
    if (p1.lastErrors.length) ctx.log(`  app errors: ${p1.lastErrors.join(" | ")}`);
    if (process.env.BENCH_PROFILE) {
      const drainMs = (p1.lastDrainEndAt ?? Number.NaN) - firstDrainAt;
      ctx.log(
        `  profile: drain deliveries ${drainMs} ms wall; app I/O waits ${Object.entries(p1.io)
          .map(([k, v]) => `${k} ${v.n}× ${v.ms} ms`)
          .join(", ")}`,
      );
    }
  }
  const durationS = fromDelivery ? fromDeliveryS : announceToLastS;
  const startAt = fromDelivery ? firstDrainAt : announcedAt;
  return {
    requests: n,
    errors: failed + p1.drainErrors,
    durationS,
    rps: n / durationS,
    p50Ms: firstRowAt - startAt,
    p99Ms: lastRowAt - startAt,
    extras: {
      "DB trips/order": psTrips / n,
      "writer Redis cmds/1k orders": (redis.commands / n) * 1000,
      "QStash msgs/1k orders": ((published + failed) / n) * 1000,
      "notBefore wait ms": waitMs,
      "lock conflicts": conflicts,
      "InnoDB deadlocks": dl1 - dl0,
      "unhandled errors": unhandledErrors(p1),
    },
  };
}

export default [insert, drainScenario(false), drainScenario(true)];

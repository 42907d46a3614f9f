/**
 * Group "writer": how fast the order writer turns reservations into MySQL rows, next to the
 * fastest way to put the same number of rows into the same table, measured in the same rounds.
 *
 * writer-drain: each round creates a voucher of ORDERS units (MySQL + Redis, like the operator
 * route), then publishes ORDERS reservations' write messages — the body, destination,
 * deduplication id and retries publishReservation (src/queue/orders.ts) uses — through the local
 * QStash with batchJSON, 100 per call, one call after the other. QStash (at most 32 deliveries in
 * flight) signs and delivers each to the app's /internal/orders/write (servers/app-seckill.ts, own
 * bun process): signature check, one MySQL transaction per order (INSERT IGNORE + stock − 1, via
 * @planetscale/database → PlanetScale-HTTP stand-in → MariaDB), then the Redis outbox ack. The
 * window runs from the first publish until MySQL holds all ORDERS rows (polled directly in
 * MariaDB every 10 ms); rps = orders/s. p50/p99 = the write handler's latency in the app. The
 * round then checks tb_seckill_voucher.stock = 0.
 *
 * writer-insert (baseline): INSERT_ROWS rows into tb_voucher_order as multi-row INSERTs of BATCH rows,
 * one statement after the other (autocommit), through the app's own @planetscale/database client
 * and the same stand-in, from the app-seckill child over IPC; rps = rows/s, p50/p99 = one
 * BATCH-row statement.
 *
 * Extra columns: "DB trips/order" (PlanetScale-HTTP requests per order/row), and for the drain
 * "Redis cmds/1k orders" (Upstash-REST commands per 1,000 orders: the writer's ack) and
 * "QStash msgs/1k orders" (messages published per 1,000 orders: writes only here).
 */
import { idsFor } from "../../../src/redis/ids.ts";
import type { Reservation } from "../../../src/services/seckill/types.ts";
import { ACK_COMMANDS, restDelta, seckillStack, startAppServer, USER_BASE, waitUntil, type AppServer, type SeckillStack } from "../fixtures/seckill-stack.ts";
import { uncountedCpu } from "../lib/cpu.ts";
import { formatInt } from "../lib/util.ts";
import { defineScenario, type Measurement, type RunOptions } from "../types.ts";

const GROUP = "writer";
/**
 * Orders per measured round, and per warm-up round. The drain runs at a few hundred orders a
 * second on the 2-core box (every order is a signed delivery, four PlanetScale-HTTP requests and
 * a Redis ack, with the stand-ins on the same cores), so 1,000 orders take ~5 s.
 */
const ORDERS = 1000;
const WARM_ORDERS = 300;
/**
 * Rows per round of the baseline, and per INSERT statement. More rows than the drain's ORDERS:
 * 1,000 rows take ~25 ms, too short a window to time; rows/s is compared, not round totals.
 */
const INSERT_ROWS = 5000;
const BATCH = 500;
/** Messages per QStash batch call when publishing. */
const PUBLISH_BATCH = 100;
/** Retries per message, as ORDER_MESSAGE_RETRIES' default. */
const RETRIES = 5;
/** The drain's shop (hash tag of its Redis keys), apart from the seckill group's. */
const SHOP = 104;
/** The baseline's voucher ids: no voucher row is needed for a bare INSERT; far above auto-increment ids. */
let insertVoucher = 800_000_000;
const DRAIN_TIMEOUT_MS = 28_000;

async function orderCount(stack: SeckillStack, voucherId: number): Promise<number> {
  const [rows] = await stack.mysql.query("SELECT COUNT(*) AS n FROM tb_voucher_order WHERE voucher_id = ?", [voucherId]);
  return Number((rows as { n: string | number }[])[0]!.n);
}

interface WriteStats {
  writes: number;
  writeErrors: number;
  p50Ms: number;
  p99Ms: number;
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
        if (!opts.warmup) ctx.log(`  writer-insert #${++round}: ${formatInt(rows)} rows in ${r.ms.toFixed(0)} ms, ${trips} DB requests`);
        const durationS = r.ms / 1000;
        return { requests: rows, errors: 0, durationS, rps: rows / durationS, p50Ms: r.p50Ms, p99Ms: r.p99Ms, extras: { "DB trips/order": trips / rows } };
      },
      teardown: app.stop,
    };
  },
});

const drain = defineScenario({
  name: "writer-drain",
  group: GROUP,
  description:
    `${ORDERS.toLocaleString("en-US")} reservations' write messages published through the local QStash (batchJSON, ${PUBLISH_BATCH} per call) to the app's /internal/orders/write ` +
    "(own bun process: signature check, one MySQL transaction per order, Redis outbox ack); window = first publish → all rows in MySQL, rps = orders/s, p50/p99 = write handler latency",
  async setup(ctx) {
    const stack = await seckillStack(ctx);
    const app = await startAppServer(stack);
    try {
      // One order end to end before anything is measured.
      await drainRound(stack, app, 1, 10_000, ctx.log);
    } catch (e) {
      await app.stop();
      throw e;
    }
    let round = 0;
    return {
      kind: "run",
      async run(opts: RunOptions): Promise<Measurement> {
        const r = await drainRound(stack, app, opts.warmup ? WARM_ORDERS : ORDERS, DRAIN_TIMEOUT_MS, ctx.log);
        if (!opts.warmup) {
          ctx.log(
            `  writer-drain #${++round}: ${formatInt(r.n)} orders in ${(r.durationS * 1000).toFixed(0)} ms (published in ${r.publishMs.toFixed(0)} ms), ` +
              `${r.dbTrips} DB requests, ${r.redis.commands} Redis commands in ${r.redis.requests} requests, QStash ${r.published} published / ${r.failed} failed attempts`,
          );
        }
        return r.measurement;
      },
      teardown: app.stop,
    };
  },
});

async function drainRound(stack: SeckillStack, app: AppServer, n: number, timeoutMs: number, log: (m: string) => void) {
  const cfg = await stack.newVoucher({ shopId: SHOP, stock: n, buckets: 1 });
  const ids = idsFor(stack.deps);
  const now = Date.now();
  const reservations: Reservation[] = [];
  for (let k = 0; k < n; k++) {
    reservations.push({ orderId: (await ids.next()).toString(), userId: USER_BASE + k + 1, voucherId: cfg.voucherId, shopId: SHOP, reservedAt: now, amount: cfg.payValue });
  }
  const writeUrl = `${app.url}/internal/orders/write`;
  await app.ask<WriteStats>({ type: "write-stats", reset: true });
  const rest0 = stack.rest();
  const q0 = stack.qstash();
  const ps0 = stack.planetscale().requests;

  const t0 = performance.now();
  for (let i = 0; i < n; i += PUBLISH_BATCH) {
    await stack.deps.queue.batchJSON(
      reservations.slice(i, i + PUBLISH_BATCH).map((r) => ({ url: writeUrl, body: r, deduplicationId: r.orderId, retries: RETRIES })),
    );
  }
  const publishMs = performance.now() - t0;
  let have = 0;
  await waitUntil(
    () => `${n} orders in MySQL (have ${have})`,
    async () => (have = await orderCount(stack, cfg.voucherId)) >= n,
    timeoutMs,
    10,
  );
  const durationS = (performance.now() - t0) / 1000;
  // QStash records a delivery after the app's answer: wait for the counters to settle.
  await uncountedCpu(() => waitUntil(() => "QStash to record every delivery", async () => stack.qstash().delivered - q0.delivered >= n, 5000, 10));
  const q1 = stack.qstash();
  const redis = restDelta(rest0, stack.rest());
  const dbTrips = stack.planetscale().requests - ps0;
  const ws = await app.ask<WriteStats>({ type: "write-stats" });
  const db = await stack.mysqlCounts(cfg.voucherId);
  if (db.orders !== n || db.stock !== 0) throw new Error(`writer-drain: MySQL has ${db.orders} orders of ${n} and stock ${db.stock} (expected 0)`);
  const published = q1.published - q0.published;
  const failed = q1.failedAttempts - q0.failedAttempts;
  // Checks what the seckill group assumes: the writer's only Redis traffic is one
  // ACK_COMMANDS-command /multi-exec per order (a retried delivery may ack twice, hence failed = 0;
  // an isolate's periodic cache-metrics flush could add a request, hence a note, not a failure).
  if (failed === 0 && (redis.multi !== n || redis.commands !== ACK_COMMANDS * n)) {
    log(`  writer-drain: expected ${n} acks of ${ACK_COMMANDS} commands, the Upstash-REST stand-in saw ${redis.multi} /multi-exec and ${redis.commands} commands`);
  }
  const measurement: Measurement = {
    requests: n,
    errors: failed + ws.writeErrors,
    durationS,
    rps: n / durationS,
    p50Ms: ws.p50Ms,
    p99Ms: ws.p99Ms,
    extras: {
      "DB trips/order": dbTrips / n,
      "Redis cmds/1k orders": (redis.commands / n) * 1000,
      "QStash msgs/1k orders": (published / n) * 1000,
    },
  };
  return { n, durationS, publishMs, dbTrips, redis, published, failed, measurement };
}

export default [insert, drain];

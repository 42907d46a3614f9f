/**
 * Bench server of groups "seckill" and "writer": the real app — createApp(createDeps(parseEnv(…)))
 * — served by Bun.serve the way src/entry/bun.ts serves it (same fetch signature with `{ clientIp }`,
 * same ExecutionContext shim: a pending-promise set behind `waitUntil`, which is where the QStash
 * publish of a reservation runs). Config: the stack's settings plus
 *
 *   SECKILL_USER_LIMIT=0, SECKILL_IP_LIMIT=0   a swarm from one address must not be rate limited
 *   SECKILL_ADMISSION_PER_SECOND=0              unless the scenario sets it (group "admission"): the
 *                                               seckill rows measure the reserve path itself, and this
 *                                               box drives more reserves per second (~8,400) than the
 *                                               default cap (8,000/s) would admit
 *   PUBLIC_URL = this server's URL               QStash delivers the write messages back here
 *   ORDER_PAY_TIMEOUT_SECONDS=86400              the delayed close messages never fire in a run
 *   LOG_LEVEL=silent, RUN_CRON=false             no log I/O, no jobs (sweep/reconcile) in the way
 *
 * src/ is untouched; the server only observes the app from outside:
 *   - it times the QStash deliveries it answers on POST ORDER_DRAIN_PATH (and the legacy
 *     ORDER_WRITE_PATH, src/queue/messages.ts): count, failures, latency, when the first arrived and the last ended;
 *   - it counts the writer side's Redis commands at the app's own client: a wrapper around the
 *     global fetch (which @upstash/redis calls per request) looks for the SHA-1 of claim-outbox,
 *     ack-outbox and release-stock(-many).lua in each request body (EVAL fallbacks by the
 *     scripts' header line) and for ZADD … outbox:due (a claim handed back); the reservations'
 *     EVALSHA, sessions and the order index do not match;
 *   - its logger (deps.log) writes nothing but counts warn/error lines by message, so a round
 *     can check that "unhandled error" never happened;
 *   - it counts every Redis command the app's client sends, by command and (for EVALSHA) by
 *     script, background work included, and the requests it serves other than QStash deliveries
 *     ("served"): the "Redis cmds/attempt" columns of the seckill and session rows; with seckill
 *     shards (SECKILL_SHARD_URLS, issue 18) per database as well ("main", "shard1", …: by the
 *     request's origin), per epoch second, and the reservation attempts among them (distinct order
 *     ids of reserve-stock EVALSHAs; a retry after a refill reuses its attempt's id);
 *   - deps.isolate.orderGroups.stats and .lockConflicts (the pipeline's own counters) are read over IPC.
 *
 * The same process also hosts the two in-process baselines, so that their client runs in a
 * process of its own (in the runner it would share one JS thread with the stand-ins it calls),
 * with the app's own, production-configured clients (deps.redis, deps.db):
 *
 *   evalsha-loop  raw EVALSHA of lua/reserve-stock.lua (scriptsFor(deps.redis).reserveStock, i.e.
 *                 createScript → EVALSHA, EVAL on NOSCRIPT) with the KEYS/ARGV `reserve()` builds,
 *                 `concurrency` closed loops for `durationMs`;
 *   insert        N rows into tb_voucher_order as multi-row INSERTs of `batch` rows, one after the
 *                 other, through deps.db (@planetscale/database → PlanetScale-HTTP stand-in).
 *
 * Env: PORT, BENCH_STACK_ENV (JSON of the stack's settings; the runner's environment is not read).
 * IPC requests carry an `id`; the reply has the same `id` and either the result or `error`:
 *   {type:"pipeline-stats", reset?} → PipelineStats (below) since the last reset
 *   {type:"evalsha-loop", …}      → {measurement, sold, saleMs}
 *   {type:"insert", …}            → {rows, ms, p50Ms, p99Ms}
 *   {type:"hold-drains", hold}    → {held}: drain deliveries wait while held (ablation of group "shards")
 */
import { createApp } from "../../../src/app.ts";
import { createDeps } from "../../../src/deps.ts";
import { parseEnv } from "../../../src/env.ts";
import { ORDER_DRAIN_PATH, ORDER_WRITE_PATH } from "../../../src/queue/messages.ts";
import { luaSources, scriptsFor } from "../../../src/redis/scripts.ts";
import type { Logger } from "../../../src/log.ts";
import type { SeckillConfig } from "../../../src/services/seckill/config.ts";
import { reserveArgs, reserveKeys } from "../../../src/services/seckill/reserve.ts";
import { OrderStatus, type Reservation } from "../../../src/services/seckill/types.ts";
import { serviceDay, toSqlUtc } from "../../../src/util/time.ts";
import { closedLoop, LatencyHistogram } from "../lib/closed-loop.ts";

const stackEnv = JSON.parse(process.env.BENCH_STACK_ENV ?? "null") as Record<string, string> | null;
if (!stackEnv) throw new Error("BENCH_STACK_ENV is required");
const port = Number(process.env.PORT);
if (!Number.isInteger(port) || port <= 0) throw new Error("PORT is required");
const selfUrl = `http://127.0.0.1:${port}`;

const config = parseEnv({
  SECKILL_ADMISSION_PER_SECOND: "0",
  ...stackEnv,
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: "0",
  LOG_LEVEL: "silent",
  RUN_CRON: "false",
  PUBLIC_URL: selfUrl,
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  PORT: String(port),
});

const pending = new Set<Promise<unknown>>();
const track = (p: Promise<unknown>) => {
  const settled = p
    .catch((err: unknown) => deps.log.error("background task failed", { err }))
    .finally(() => pending.delete(settled));
  pending.add(settled);
};
// ------------------------------------------------------------------------------------ counters

/** warn/error lines by message since the last reset; nothing is written. */
let logLines = new Map<string, number>();
let lastErrors: string[] = [];
/**
 * Error lines by message and the start of their error's text (digits blanked, so one cause is one
 * entry: "unhandled error: ERR max commands per second limit exceeded. Limit: #, Usage: #"), ≤ 50 kinds.
 */
let errorKinds = new Map<string, number>();
const countLine = (level: string) => (msg: string, fields?: Record<string, unknown>) => {
  const k = `${level}: ${msg}`;
  logLines.set(k, (logLines.get(k) ?? 0) + 1);
  if (level === "error") {
    const err = fields?.err;
    const text = err instanceof Error ? `${err.name}: ${err.message}` : "";
    const kind = `${msg}: ${text.slice(0, 90).replace(/\d+/g, "#")}`;
    if (errorKinds.has(kind) || errorKinds.size < 50) errorKinds.set(kind, (errorKinds.get(kind) ?? 0) + 1);
  }
  if (level === "error" && lastErrors.length < 5) {
    const err = fields?.err;
    lastErrors.push(`${msg}: ${err instanceof Error ? err.message : JSON.stringify(fields ?? {}).slice(0, 300)}`);
  }
};
const countingLog: Logger = {
  debug: () => {},
  info: () => {},
  warn: countLine("warn"),
  error: countLine("error"),
  child: () => countingLog,
  enabled: (level) => level === "warn" || level === "error",
};

const sha1 = (src: string) => new Bun.CryptoHasher("sha1").update(src).digest("hex");
/** Writer-side scripts: SHA-1 (EVALSHA) and a string only their source contains (EVAL on NOSCRIPT). */
const WRITER_SCRIPTS = {
  claims: { sha: `"${sha1(luaSources.claimOutbox)}"`, src: "claim-outbox.lua —" },
  acks: { sha: `"${sha1(luaSources.ackOutbox)}"`, src: "ack-outbox.lua —" },
  releases: { sha: `"${sha1(luaSources.releaseStockMany)}"`, src: "release-stock-many.lua —" },
  releaseOne: { sha: `"${sha1(luaSources.releaseStock)}"`, src: "release-stock.lua —" },
} as const;
const HANDBACK = /"zadd","seckill:\{s\d+\}:outbox:due"/gi;
type WriterRedis = { claims: number; acks: number; releases: number; handbacks: number; evalFallbacks: number };
const zeroWriter = (): WriterRedis => ({ claims: 0, acks: 0, releases: 0, handbacks: 0, evalFallbacks: 0 });
let writerRedis = zeroWriter();
const occurrences = (hay: string, needle: string): number => {
  let n = 0;
  for (let i = hay.indexOf(needle); i !== -1; i = hay.indexOf(needle, i + needle.length)) n++;
  return n;
};
const restUrl = config.UPSTASH_REDIS_REST_URL.replace(/\/$/, "");
/** Origin (scheme://host:port) of a URL; prefixes alone would confuse port 3000 with 30001. */
const originOf = (url: string): string => {
  const slash = url.indexOf("/", url.indexOf("//") + 2);
  return slash === -1 ? url : url.slice(0, slash);
};
/**
 * The Redis databases the app's clients talk to, by origin: "main" (UPSTASH_REDIS_REST_URL) and
 * "shard1" … "shardN" (SECKILL_SHARD_URLS, in order; issue 18).
 */
const redisDbs = new Map<string, string>([[originOf(restUrl), "main"]]);
config.SECKILL_SHARD_URLS.split(",")
  .map((u) => u.trim())
  .filter((u) => u !== "")
  .forEach((u, i) => {
    redisDbs.set(originOf(u.replace(/\/$/, "")), `shard${i + 1}`);
  });
const dbUrl = new URL(config.DATABASE_URL).host;
const qstashUrl = config.QSTASH_URL.replace(/\/$/, "");
/**
 * Outgoing requests by kind — count and ms until the response headers — for profiling the writer
 * from outside (a drain delivery is sequential, so these add up to its I/O waits).
 */
let io = new Map<string, { n: number; ms: number }>();
function ioKind(url: string, body: string | undefined): string {
  if (redisDbs.has(originOf(url))) {
    if (body?.includes(WRITER_SCRIPTS.claims.sha)) return "redis claim";
    if (body?.includes(WRITER_SCRIPTS.acks.sha)) return "redis ack";
    return "redis other";
  }
  if (url.startsWith(qstashUrl)) return "qstash publish";
  if (url.includes(dbUrl)) {
    const m = body ? /"query":"\s*(\w+)/.exec(body) : null;
    return `mysql ${m?.[1]?.toUpperCase() ?? "?"}`;
  }
  return "other";
}
/**
 * Every Redis command the app's client sends, by kind: the command name, and for EVALSHA the
 * script (`evalsha reserveStock`, `evalsha sessionSync`, …; EVAL fallbacks as `eval`). Counted
 * from the @upstash/redis request bodies (a JSON array per command; /pipeline and /multi-exec
 * send an array of them): in JSON text an unescaped `["` opens an array whose first element is a
 * string — a command — since a quote inside a string argument is always escaped. This is the
 * app's own client, so background work (session sync, UV and cache-metric flushes, the id lease,
 * the order-index flush, the writer) is included.
 */
const SCRIPT_BY_SHA = new Map(Object.entries(luaSources).map(([name, src]) => [sha1(src), name]));
const COMMAND = /\["([A-Za-z]+)"(?:,"([0-9a-f]{40})")?/g;
let redisCmds = new Map<string, number>();
/**
 * Every command the app's client sent, by the epoch second it was sent in (the admission limit is
 * per clock second, so its claim is read per second, not as a window average). Emptied by reset;
 * a round lasts seconds, so this holds a handful of entries.
 */
let redisPerSecond = new Map<number, number>();
/**
 * The same per database ("main", "shard1", …): commands by kind, and per epoch second all commands
 * and the reservations among them. `redis`/`redisPerSecond` above stay the main database's alone
 * (what the unsharded rows have always read). Kept only when the app has shards (countByDb below).
 */
interface DbCounts {
  kinds: Map<string, number>;
  perSecond: Map<number, number>;
  /** Distinct reservation attempts (order ids of reserve-stock EVALSHAs) first sent in each epoch second. */
  attemptsPerSecond: Map<number, number>;
  /** Reserve-stock EVALSHAs that repeated an attempt (a retry after a refill), per epoch second. */
  retriesPerSecond: Map<number, number>;
}
let byDb = new Map<string, DbCounts>();
/**
 * Order ids of the reserve-stock EVALSHAs sent since the reset. reserve() sends the same KEYS and
 * ARGV again when it retries after a refill (src/services/seckill/reserve.ts: one order id per
 * attempt), so distinct order ids = attempts that reached a database, the rest = retries.
 */
let reserveOrderIds = new Set<string>();
/** Commands in requests a database answered with status 400 (throttled), by database and kind. */
let refusedByDb = new Map<string, Map<string, number>>();
let reserveRetries = 0;
/** The order id in a reserve-stock command's fence key (reserveKeys: seckill:{s<shop>}:fence:<orderId>). */
const FENCE_ID = /:fence:(\d+)"/;
/**
 * Per-database counting only for an app with shards: the unsharded rows (seckill, writer, …) keep
 * exactly the counting they were measured with before shards (no extra work per command).
 */
const countByDb = redisDbs.size > 1;
function countRedisCommands(body: string, db: string): void {
  const second = Math.floor(Date.now() / 1000);
  if (!countByDb) {
    for (const m of body.matchAll(COMMAND)) {
      redisPerSecond.set(second, (redisPerSecond.get(second) ?? 0) + 1);
      const name = m[1]!.toLowerCase();
      const kind = name === "evalsha" ? `evalsha ${SCRIPT_BY_SHA.get(m[2] ?? "") ?? "?"}` : name;
      redisCmds.set(kind, (redisCmds.get(kind) ?? 0) + 1);
    }
    return;
  }
  let c = byDb.get(db);
  if (!c)
    byDb.set(
      db,
      (c = { kinds: new Map(), perSecond: new Map(), attemptsPerSecond: new Map(), retriesPerSecond: new Map() }),
    );
  const matches = [...body.matchAll(COMMAND)];
  for (let i = 0; i < matches.length; i++) {
    const m = matches[i]!;
    const name = m[1]!.toLowerCase();
    const kind = name === "evalsha" ? `evalsha ${SCRIPT_BY_SHA.get(m[2] ?? "") ?? "?"}` : name;
    if (db === "main") {
      redisPerSecond.set(second, (redisPerSecond.get(second) ?? 0) + 1);
      redisCmds.set(kind, (redisCmds.get(kind) ?? 0) + 1);
    }
    c.kinds.set(kind, (c.kinds.get(kind) ?? 0) + 1);
    c.perSecond.set(second, (c.perSecond.get(second) ?? 0) + 1);
    if (kind === "evalsha reserveStock") {
      const end = i + 1 < matches.length ? matches[i + 1]!.index : body.length;
      const id = FENCE_ID.exec(body.slice(m.index, end))?.[1];
      if (id !== undefined && reserveOrderIds.has(id)) {
        reserveRetries++;
        c.retriesPerSecond.set(second, (c.retriesPerSecond.get(second) ?? 0) + 1);
      } else {
        if (id !== undefined) reserveOrderIds.add(id);
        c.attemptsPerSecond.set(second, (c.attemptsPerSecond.get(second) ?? 0) + 1);
      }
    }
  }
}
const realFetch = globalThis.fetch;
const countingFetch = ((input: RequestInfo | URL, init?: RequestInit) => {
  const body = init?.body;
  const url = String(input instanceof Request ? input.url : input);
  const kind = ioKind(url, typeof body === "string" ? body : undefined);
  const t0 = performance.now();
  let isReserve = false;
  const done = () => {
    if (isReserve) lastReserveAt = Date.now();
    const e = io.get(kind) ?? { n: 0, ms: 0 };
    e.n++;
    e.ms += performance.now() - t0;
    io.set(kind, e);
  };
  const db = typeof body === "string" ? redisDbs.get(originOf(url)) : undefined;
  if (typeof body === "string" && db !== undefined) {
    countRedisCommands(body, db);
    if (body.includes(RESERVE_SHA)) {
      if (Number.isNaN(firstReserveAt)) firstReserveAt = Date.now();
      isReserve = true;
    }
    for (const [k, s] of Object.entries(WRITER_SCRIPTS)) {
      const a = occurrences(body, s.sha);
      const b = body.includes(s.src) ? occurrences(body, s.src) : 0;
      const key = k === "releaseOne" ? "releases" : (k as "claims" | "acks" | "releases");
      writerRedis[key] += a + b;
      writerRedis.evalFallbacks += b;
    }
    const h = body.match(HANDBACK);
    if (h) writerRedis.handbacks += h.length;
  }
  const p = realFetch(input, init);
  p.then(done, done);
  // With shards: the commands of every request a database answered 400 — the stand-in's
  // throttled status (scripts/stack/upstash-rest.ts THROTTLED_STATUS) — by kind; the body is not read.
  if (countByDb && db !== undefined && typeof body === "string") {
    p.then(
      (res) => {
        if (res.status !== 400) return;
        const c = refusedByDb.get(db) ?? new Map<string, number>();
        refusedByDb.set(db, c);
        for (const m of body.matchAll(COMMAND)) {
          const name = m[1]!.toLowerCase();
          const kind = name === "evalsha" ? `evalsha ${SCRIPT_BY_SHA.get(m[2] ?? "") ?? "?"}` : name;
          c.set(kind, (c.get(kind) ?? 0) + 1);
        }
      },
      () => {},
    );
  }
  return p;
}) as typeof fetch;
globalThis.fetch = Object.assign(countingFetch, realFetch);

const deps = createDeps(config, { waitUntil: track, log: countingLog });
/**
 * With shards: when this isolate handled a SOLD_OUT from Redis (memory.markSoldOut: code 4, after
 * refills found every shard empty; epoch ms at the call, i.e. after the reply), how many attempts
 * the sold-out memo answered per 100 ms, and when it last handled a reservation's success
 * (memory.rememberHolder) — so a round can count SOLD_OUT answers given while units were still to
 * be sold. Observed by wrapping the isolate's SeckillMemory methods (src/ untouched); unsharded
 * rows keep the plain object.
 */
let soldOutMarks: number[] = [];
let memoSoldOutPer100ms = new Map<number, number>();
let lastSuccessAt = Number.NaN;
if (countByDb) {
  const memory = deps.isolate.seckill;
  const isSoldOutFor = memory.isSoldOutFor.bind(memory);
  const markSoldOut = memory.markSoldOut.bind(memory);
  const rememberHolder = memory.rememberHolder.bind(memory);
  memory.rememberHolder = (voucherId, userId, orderId, now) => {
    lastSuccessAt = Date.now();
    rememberHolder(voucherId, userId, orderId, now);
  };
  memory.isSoldOutFor = (voucherId, userId, now) => {
    const yes = isSoldOutFor(voucherId, userId, now);
    if (yes) {
      const b = Math.floor(now / 100);
      memoSoldOutPer100ms.set(b, (memoSoldOutPer100ms.get(b) ?? 0) + 1);
    }
    return yes;
  };
  memory.markSoldOut = (voucherId, now) => {
    if (soldOutMarks.length < 10_000) soldOutMarks.push(Date.now());
    return markSoldOut(voucherId, now);
  };
}
const app = createApp(deps);
const ctx = { waitUntil: track, passThroughOnException() {}, props: {} };

// ----------------------------------------------------------------------- QStash delivery timing

const DRAIN_PATHS: string[] = [ORDER_DRAIN_PATH, ORDER_WRITE_PATH];
let drains = 0;
let drainErrors = 0;
let drainHist = new LatencyHistogram();
/** Epoch ms: arrival of the first drain delivery, end of the last one, since the last reset. */
let firstDrainAt = Number.NaN;
let lastDrainEndAt = Number.NaN;
/** Requests served other than QStash deliveries (the swarm's attempts), since the last reset. */
let served = 0;
/**
 * Epoch ms: the first reserve-stock request the app's client sent, and the reply to the last one,
 * since the last reset — the sale's span as the app saw it. (Order ids no longer tell it: an id's
 * time is its block's draw time, up to BLOCK_MAX_AGE_MS before the id was issued.)
 */
let firstReserveAt = Number.NaN;
let lastReserveAt = Number.NaN;
const RESERVE_SHA = sha1(luaSources.reserveStock);

/**
 * Ablation seam of group "shards" ({type:"hold-drains", hold}): while held, QStash's drain
 * deliveries wait here before the app sees them (well inside QStash's 30 s delivery timeout), so
 * the writer's work moves out of a window; releasing lets every waiting delivery through.
 */
let drainHold: { promise: Promise<void>; release: () => void } | null = null;

const server = Bun.serve({
  port,
  hostname: "127.0.0.1",
  fetch: async (req, srv) => {
    const env = { clientIp: srv.requestIP(req)?.address };
    if (!DRAIN_PATHS.some((p) => req.url.endsWith(p))) {
      served++;
      return app.fetch(req, env, ctx);
    }
    if (drainHold) await drainHold.promise;
    if (Number.isNaN(firstDrainAt)) firstDrainAt = Date.now();
    const t0 = performance.now();
    const res = await app.fetch(req, env, ctx);
    drainHist.recordMs(performance.now() - t0);
    lastDrainEndAt = Date.now();
    drains++;
    if (res.status >= 300) drainErrors++;
    return res;
  },
});
console.log(`app-seckill listening on ${server.url.href}`);

// ------------------------------------------------------------------------------------ baselines

interface EvalshaLoop {
  durationMs: number;
  concurrency: number;
  /** A voucher whose keys the runner loaded into Redis (loadSeckillIntoRedis); no MySQL rows. */
  cfg: SeckillConfig;
  /** Buyers: userBase+1 … userBase+users, taken round robin (one per call, like the swarm's tokens). */
  userBase: number;
  users: number;
}

/** The baseline's order ids: unique within this process is enough (nothing is written to MySQL). */
let baselineId = BigInt(Date.now()) << 22n;

async function evalshaLoop(o: EvalshaLoop) {
  const script = scriptsFor(deps.redis).reserveStock;
  const c = deps.config;
  let next = 0;
  let sold = 0;
  let firstMs = Number.NaN;
  let lastMs = Number.NaN;
  const unexpected = new Map<number, number>();
  const measurement = await closedLoop({
    durationMs: o.durationMs,
    concurrency: o.concurrency,
    op: async () => {
      const userId = o.userBase + (next++ % o.users) + 1;
      const orderId = (baselineId++).toString();
      const now = Date.now();
      const r: Reservation = {
        orderId,
        userId,
        voucherId: o.cfg.voucherId,
        shopId: o.cfg.shopId,
        reservedAt: now,
        amount: o.cfg.payValue,
      };
      // Exactly the KEYS and ARGV of reserve() in src/services/seckill/reserve.ts.
      const [code] = await script.exec(
        reserveKeys(o.cfg, userId, "127.0.0.1", serviceDay(now, c.SERVICE_TIME_ZONE), orderId),
        reserveArgs(c, r),
      );
      if (code === 0) {
        const t = performance.now();
        sold++;
        if (Number.isNaN(firstMs)) firstMs = t;
        lastMs = t;
      } else if (code !== 4 && code !== 5) {
        unexpected.set(code, (unexpected.get(code) ?? 0) + 1);
      }
    },
  });
  if (unexpected.size > 0)
    throw new Error(`reserve-stock.lua answered unexpected codes: ${JSON.stringify(Object.fromEntries(unexpected))}`);
  return { measurement, sold, saleMs: lastMs - firstMs };
}

interface InsertRun {
  voucherId: number;
  rows: number;
  batch: number;
  userBase: number;
}

async function insertRows(o: InsertRun) {
  const ids = deps.isolate.ids;
  const hist = new LatencyHistogram();
  const t0 = performance.now();
  for (let done = 0; done < o.rows; ) {
    const n = Math.min(o.batch, o.rows - done);
    const params: unknown[] = [];
    const now = toSqlUtc(Date.now());
    for (let k = 0; k < n; k++)
      params.push((await ids.next()).toString(), o.userBase + done + k + 1, o.voucherId, OrderStatus.unpaid, now);
    const sql = `INSERT INTO tb_voucher_order (id, user_id, voucher_id, status, create_time) VALUES ${Array.from({ length: n }, () => "(?, ?, ?, ?, ?)").join(", ")}`;
    const s = performance.now();
    const res = await deps.db.execute(sql, params);
    hist.recordMs(performance.now() - s);
    if (res.rowsAffected !== n) throw new Error(`INSERT of ${n} rows affected ${res.rowsAffected}`);
    done += n;
  }
  return { rows: o.rows, ms: performance.now() - t0, p50Ms: hist.percentileMs(0.5), p99Ms: hist.percentileMs(0.99) };
}

// ------------------------------------------------------------------------------------------ IPC

type Request =
  | { id: number; type: "pipeline-stats"; reset?: boolean }
  | ({ id: number; type: "evalsha-loop" } & EvalshaLoop)
  | ({ id: number; type: "insert" } & InsertRun)
  | { id: number; type: "hold-drains"; hold: boolean };

async function handle(m: Request): Promise<Record<string, unknown>> {
  switch (m.type) {
    case "pipeline-stats": {
      const out = {
        drains,
        drainErrors,
        p50Ms: drainHist.percentileMs(0.5),
        p99Ms: drainHist.percentileMs(0.99),
        firstDrainAt: Number.isNaN(firstDrainAt) ? null : firstDrainAt,
        lastDrainEndAt: Number.isNaN(lastDrainEndAt) ? null : lastDrainEndAt,
        writerRedis: { ...writerRedis },
        orderGroups: { ...deps.isolate.orderGroups.stats },
        lockConflicts: { ...deps.isolate.orderGroups.lockConflicts },
        log: Object.fromEntries(logLines),
        lastErrors: [...lastErrors],
        errorKinds: Object.fromEntries(errorKinds),
        io: Object.fromEntries([...io].map(([k, v]) => [k, { n: v.n, ms: Math.round(v.ms) }])),
        served,
        redis: Object.fromEntries(redisCmds),
        redisPerSecond: Object.fromEntries(redisPerSecond),
        byDb: Object.fromEntries(
          [...byDb].map(([db, c]) => [
            db,
            {
              kinds: Object.fromEntries(c.kinds),
              perSecond: Object.fromEntries(c.perSecond),
              attemptsPerSecond: Object.fromEntries(c.attemptsPerSecond),
              retriesPerSecond: Object.fromEntries(c.retriesPerSecond),
            },
          ]),
        ),
        refusedByDb: Object.fromEntries([...refusedByDb].map(([db, c]) => [db, Object.fromEntries(c)])),
        reserveAttempts: reserveOrderIds.size,
        reserveRetries,
        admission: { ...deps.isolate.seckillAdmission.stats },
        moves: { ...deps.isolate.seckillMoves },
        soldOutMarks: [...soldOutMarks],
        memoSoldOutPer100ms: Object.fromEntries(memoSoldOutPer100ms),
        lastSuccessAt: Number.isNaN(lastSuccessAt) ? null : lastSuccessAt,
        firstReserveAt: Number.isNaN(firstReserveAt) ? null : firstReserveAt,
        lastReserveAt: Number.isNaN(lastReserveAt) ? null : lastReserveAt,
      };
      if (m.reset) {
        drains = 0;
        drainErrors = 0;
        drainHist = new LatencyHistogram();
        firstDrainAt = Number.NaN;
        lastDrainEndAt = Number.NaN;
        writerRedis = zeroWriter();
        logLines = new Map();
        lastErrors = [];
        errorKinds = new Map();
        io = new Map();
        served = 0;
        redisCmds = new Map();
        redisPerSecond = new Map();
        byDb = new Map();
        reserveOrderIds = new Set();
        refusedByDb = new Map();
        reserveRetries = 0;
        soldOutMarks = [];
        memoSoldOutPer100ms = new Map();
        lastSuccessAt = Number.NaN;
        firstReserveAt = Number.NaN;
        lastReserveAt = Number.NaN;
      }
      return out;
    }
    case "evalsha-loop":
      return await evalshaLoop(m);
    case "insert":
      return await insertRows(m);
    case "hold-drains": {
      if (m.hold && !drainHold) {
        let release = () => {};
        const promise = new Promise<void>((r) => (release = r));
        drainHold = { promise, release };
      } else if (!m.hold && drainHold) {
        drainHold.release();
        drainHold = null;
      }
      return { held: drainHold !== null };
    }
    default:
      throw new Error(`unknown request ${JSON.stringify(m)}`);
  }
}

process.on("message", (raw: unknown) => {
  const m = raw as Request | null;
  if (!m || typeof m.id !== "number") return;
  handle(m).then(
    (result) => process.send?.({ ...result, id: m.id }),
    (e: unknown) => process.send?.({ id: m.id, error: e instanceof Error ? e.message : String(e) }),
  );
});
process.on("SIGTERM", () => {
  void (async () => {
    await server.stop(true);
    await Promise.race([Promise.allSettled([...pending]), new Promise((r) => setTimeout(r, 1000))]);
    process.exit(0);
  })();
});

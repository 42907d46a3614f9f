/**
 * A flash sale seen from outside, for the tests that run one against a real HTTP server (the chaos
 * test, tests/chaos/sale.test.ts; the runtime matrix, tests/runtimes/): one buyer's attempt and how
 * it was answered, settling the order pipeline, and the checks of what must hold afterwards —
 * every acknowledged order in MySQL exactly once with its buyer, no order a buyer was told they do
 * not have, stock conserved in MySQL and Redis, reconcile without drift.
 *
 * They rely only on the public contract of the order pipeline (HTTP API, outbox hash, MySQL
 * tables, Redis stock and buyers keys, reconcile's report), not on how orders travel.
 *
 * Sharded vouchers (issue 18): a voucher's keys and its shop's outbox entries are in the main
 * database or in the seckill shards (`deps.seckillShards`), under the same names, never both; the
 * Redis reads below sum (or join) over all of them, so they hold for either kind of voucher.
 */
import { expect, test } from "bun:test";
import type { Deps } from "../../src/deps.ts";
import { runCron } from "../../src/jobs/index.ts";
import { keys } from "../../src/redis/keys.ts";
import { reconcile, type VoucherReport } from "../../src/services/seckill/reconcile.ts";
import { pollUntil, within } from "./child.ts";
import { expectNoHazardLines, limiter } from "./runtimes.ts";

export interface Buyer {
  userId: number;
  token: string;
}

export type Outcome =
  | { kind: "ack"; orderId: string }
  /** `orderId`: the order a DUPLICATE_ORDER names (the one the buyer already holds). */
  | { kind: "rejected"; code: string; status: number; orderId?: string }
  | { kind: "error"; status: number; code?: string }
  | { kind: "lost"; error: string };

/** One attempt of a buyer and its answer. */
export interface Attempt {
  buyer: Buyer;
  outcome: Outcome;
}

async function httpJson<T>(
  baseUrl: string,
  method: string,
  path: string,
  opts: { token?: string; json?: unknown; timeoutMs: number },
): Promise<{ status: number; body: { success: boolean; data?: T; code?: string; errorMsg?: string } }> {
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers: {
      ...(opts.token ? { authorization: opts.token } : {}),
      ...(opts.json !== undefined ? { "content-type": "application/json" } : {}),
    },
    body: opts.json === undefined ? undefined : JSON.stringify(opts.json),
    signal: AbortSignal.timeout(opts.timeoutMs),
  });
  return { status: res.status, body: (await res.json()) as { success: boolean; data?: T } };
}

/**
 * A sale through the app's operator routes on `baseUrl`: a fresh shop type (SQL), a shop
 * (`POST /api/shop`) and a seckill voucher of `units` in one bucket (`POST /api/voucher/seckill`),
 * on sale from a minute ago for an hour.
 */
export async function createSaleOverHttp(
  baseUrl: string,
  deps: Pick<Deps, "db" | "config">,
  opts: { units: number; label?: string; timeoutMs?: number },
): Promise<{ shopId: number; voucherId: number }> {
  const label = opts.label ?? "sale";
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const operator = `Bearer ${deps.config.ADMIN_TOKEN}`;
  const type = await deps.db.execute("INSERT INTO tb_shop_type (name, icon, sort) VALUES (?, '', 99)", [
    `${label}-${crypto.randomUUID().slice(0, 8)}`,
  ]);
  const shop = await httpJson<number>(baseUrl, "POST", "/api/shop", {
    token: operator,
    json: {
      name: `${label}-shop-${crypto.randomUUID().slice(0, 8)}`,
      typeId: Number(type.insertId),
      address: `${label} road 1`,
      x: 120.15,
      y: 30.33,
      avgPrice: 80,
      images: "/imgs/a.jpg",
      area: "test",
    },
    timeoutMs,
  });
  if (!shop.body.success || typeof shop.body.data !== "number")
    throw new Error(`create shop failed: ${JSON.stringify(shop.body)}`);
  const now = Date.now();
  const voucher = await httpJson<number>(baseUrl, "POST", "/api/voucher/seckill", {
    token: operator,
    json: {
      shopId: shop.body.data,
      title: `${label} flash`,
      payValue: 8000,
      actualValue: 10000,
      stock: opts.units,
      buckets: 1,
      shopDailyLimit: 0,
      beginTime: now - 60_000,
      endTime: now + 3_600_000,
    },
    timeoutMs,
  });
  if (!voucher.body.success || typeof voucher.body.data !== "number")
    throw new Error(`create seckill voucher failed: ${JSON.stringify(voucher.body)}`);
  return { shopId: shop.body.data, voucherId: voucher.body.data };
}

/**
 * `POST /api/voucher-order/seckill/{voucherId}` as `buyer`: an order id (ack), a business refusal
 * (200 success:false, or a 4xx such as 429), a 5xx (error), or no complete answer (lost: network
 * error, timeout, a reply cut mid-body).
 */
/**
 * `wrangler dev`'s own proxy (not the Worker, and not part of a deployment) answers this plain-text
 * 503 when its fetch to the Worker fails — seen on a CPU-starved machine, with the Worker alive
 * and its isolate unchanged. It does not say whether the Worker got the request, so a client
 * sends it again (as wrangler asks) and learns the truth from the Worker: the order, or
 * DUPLICATE_ORDER with it. Counted, so a run shows how often it happened.
 */
export const DEV_PROXY_RESTARTED = "Your worker restarted mid-request";
export const devProxy = { retried: 0 };
const DEV_PROXY_TRIES = 5;

export async function buy(
  baseUrl: string,
  voucherId: number,
  buyer: Buyer,
  opts: { timeoutMs: number; signal?: AbortSignal },
): Promise<Outcome> {
  let res: Response;
  let text: string;
  try {
    const timeout = AbortSignal.timeout(opts.timeoutMs);
    for (let attempt = 1; ; attempt++) {
      res = await fetch(`${baseUrl}/api/voucher-order/seckill/${voucherId}`, {
        method: "POST",
        headers: { authorization: buyer.token },
        signal: opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout,
      });
      text = await res.text();
      if (res.status !== 503 || !text.startsWith(DEV_PROXY_RESTARTED) || attempt >= DEV_PROXY_TRIES) break;
      devProxy.retried++;
    }
  } catch (err) {
    return { kind: "lost", error: err instanceof Error ? err.message : String(err) };
  }
  let body: { success?: boolean; data?: unknown; code?: string };
  try {
    body = JSON.parse(text) as typeof body;
  } catch {
    if (res.status >= 500) return { kind: "error", status: res.status };
    return { kind: "lost", error: `cut reply (${res.status}): ${text.slice(0, 80)}` };
  }
  if (res.status === 200 && body.success === true && typeof body.data === "string")
    return { kind: "ack", orderId: body.data };
  if (res.status >= 500) return { kind: "error", status: res.status, code: body.code };
  return {
    kind: "rejected",
    code: body.code ?? "?",
    status: res.status,
    ...(typeof body.data === "string" ? { orderId: body.data } : {}),
  };
}

export async function mysqlOrderCount(deps: Pick<Deps, "db">, voucherId: number): Promise<number> {
  const r = (await deps.db.execute("SELECT COUNT(*) AS n FROM tb_voucher_order WHERE voucher_id = ?", [voucherId]))
    .rows[0] as { n: string };
  return Number(r.n);
}

/** The Redis side of the app: its main database, and its seckill shards when it has any. */
export type RedisSide = Pick<Deps, "redis"> & Partial<Pick<Deps, "seckillShards">>;

/** Every database a voucher's keys or a shop's outbox may be in: the main one, then each seckill shard. */
const databases = (deps: RedisSide) => [deps.redis, ...(deps.seckillShards ?? [])];

/** Redis stock (bucket 0) and buyers of a voucher, summed over the main database and every shard. */
export async function redisSide(
  deps: RedisSide,
  shopId: number,
  voucherId: number,
): Promise<{ stock: number; buyers: number }> {
  const per = await Promise.all(
    databases(deps).map(async (r) => {
      const [stock, buyers] = await Promise.all([
        r.get<number | string>(keys.seckill.stock(shopId, voucherId, 0)),
        r.scard(keys.seckill.buyers(shopId, voucherId)),
      ]);
      return { stock: Number(stock ?? 0), buyers };
    }),
  );
  return { stock: per.reduce((a, p) => a + p.stock, 0), buyers: per.reduce((a, p) => a + p.buyers, 0) };
}

/** Entries of the shop's outboxes (the main database's and one per shard). */
export async function outboxSize(deps: RedisSide, shopId: number): Promise<number> {
  const sizes = await Promise.all(databases(deps).map((r) => r.hlen(keys.seckill.outbox(shopId))));
  return sizes.reduce((a, n) => a + n, 0);
}

/** Buyers of a voucher: the members of its buyers set in every database. */
async function buyerMembersOf(deps: RedisSide, shopId: number, voucherId: number): Promise<Set<string>> {
  const sets = await Promise.all(
    databases(deps).map((r) => r.smembers<string[]>(keys.seckill.buyers(shopId, voucherId))),
  );
  return new Set(sets.flat().map(String));
}

/** One cron pass through the app's own code at `now` (runs every job; failures are reported). */
export async function cronPassInProcess(deps: Deps, now: number): Promise<string[]> {
  const results = await within(30_000, "one cron pass", runCron(deps, undefined, now));
  return results.filter((r) => !r.ok).map((r) => `job ${r.name} failed`);
}

export interface SettleOptions {
  timeoutMs: number;
  /**
   * Runs the cron jobs once at `now` (default: in this process, through `deps`, whose PUBLIC_URL
   * decides where the drains it publishes are delivered); returns failure notes.
   */
  cronPass?: (now: number) => Promise<string[]>;
  /** Outbox size and MySQL rows per round are appended here. */
  trace?: string[];
  /** Failure notes of cron passes are appended here. */
  log?: string[];
}

/**
 * Cron passes until the shop's outbox is empty and the voucher's MySQL rows stop changing. The
 * clock runs ahead (2 min, so every outbox entry is overdue for the sweep) and then 12× fast, so
 * an entry still pending becomes overdue again every ~5 s of real time, not once a minute.
 */
export async function settle(
  deps: Deps,
  shopId: number,
  voucherId: number,
  opts: SettleOptions,
): Promise<{ ms: number; rounds: number }> {
  const started = Date.now();
  const cronPass = opts.cronPass ?? ((now: number) => cronPassInProcess(deps, now));
  let rounds = 0;
  let previous = "";
  return await pollUntil(
    "the outbox to empty and the MySQL rows to stop changing",
    async () => {
      rounds++;
      const now = Date.now() + 120_000 + Math.floor((Date.now() - started) / 5_000) * 61_000;
      for (const note of await cronPass(now)) opts.log?.push(`cron round ${rounds}: ${note}`);
      const outbox = await outboxSize(deps, shopId);
      const m = (
        await deps.db.execute(
          `SELECT COUNT(*) AS n, COALESCE(SUM(status), 0) AS s, (SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?) AS stock
           FROM tb_voucher_order WHERE voucher_id = ?`,
          [voucherId, voucherId],
        )
      ).rows[0] as { n: string; s: string; stock: string };
      const snapshot = `${m.n}/${m.s}/${m.stock}`;
      opts.trace?.push(`${Math.round((Date.now() - started) / 100) / 10}s outbox=${outbox} rows=${m.n}`);
      const stable = snapshot === previous;
      previous = snapshot;
      return outbox === 0 && stable ? { ms: Date.now() - started, rounds } : undefined;
    },
    opts.timeoutMs,
    200,
  );
}

export interface OrderFindings {
  /** MySQL rows of the voucher. */
  rows: { id: string; userId: number; status: number }[];
  /** Acknowledged order ids not in MySQL exactly once (with the row count). */
  missing: string[];
  /** Acknowledged order ids whose row names another buyer. */
  wrongUser: string[];
  /** Users with more than one order of the voucher, and how many. */
  duplicateBuyers: [number, number][];
  /** Rows of buyers every one of whose attempts was answered, none with an order id: an order they were told they do not have. */
  unannounced: string[];
  /** Rows not in an active status (unpaid, paid, refunding). */
  inactive: string[];
  /**
   * Rows whose buyer was never told of that order: not acknowledged with its id, and no retry
   * answered DUPLICATE_ORDER ("you hold one") — an order its holder cannot know about.
   */
  untold: string[];
  /**
   * Rows whose buyer learnt only that it holds an order (DUPLICATE_ORDER without the id, which the
   * contract allows until the writer has it in MySQL): the id is then in `GET /api/voucher-order/of/me`.
   */
  heldWithoutId: { orderId: string; buyer: Buyer }[];
}

/** Stock conserved in MySQL and in Redis, and the Redis buyers exactly the users with orders. */
export function expectStockConserved(st: Awaited<ReturnType<typeof stockFindings>>, units: number): void {
  expect({
    mysql: st.mysqlStock + st.active,
    redis: st.redis.stock + st.redis.buyers,
    buyersEqualOrders: st.redis.buyers === st.active,
    stockEqual: st.redis.stock === st.mysqlStock,
    activeNotInBuyers: st.activeNotInBuyers,
  }).toEqual({ mysql: units, redis: units, buyersEqualOrders: true, stockEqual: true, activeNotInBuyers: [] });
}

/** Every acknowledged order in MySQL once with its buyer, no holder told they lack it, and all `units` sold. */
export function expectEveryOrderOnce(found: OrderFindings, units: number): void {
  expect(found.missing).toEqual([]);
  expect(found.wrongUser).toEqual([]);
  expect(found.duplicateBuyers).toEqual([]);
  expect(found.unannounced).toEqual([]);
  expect(found.inactive).toEqual([]);
  expect(found.rows.length).toBe(units);
}

/** What MySQL holds for a voucher, against what the buyers were told. */
export async function orderFindings(
  deps: Pick<Deps, "db">,
  voucherId: number,
  attempts: readonly Attempt[],
): Promise<OrderFindings> {
  const raw = (
    await within(
      10_000,
      "reading orders",
      deps.db.execute("SELECT id, user_id, status FROM tb_voucher_order WHERE voucher_id = ?", [voucherId]),
    )
  ).rows as {
    id: string;
    user_id: string;
    status: string;
  }[];
  const rows = raw.map((r) => ({ id: String(r.id), userId: Number(r.user_id), status: Number(r.status) }));
  const byId = new Map<string, number[]>();
  for (const r of rows) byId.set(r.id, [...(byId.get(r.id) ?? []), r.userId]);
  const missing: string[] = [];
  const wrongUser: string[] = [];
  for (const { buyer, outcome: o } of attempts) {
    if (o.kind !== "ack") continue;
    const users = byId.get(o.orderId);
    if (users?.length !== 1) missing.push(`${o.orderId} (${users?.length ?? 0} rows)`);
    else if (users[0] !== buyer.userId) wrongUser.push(`${o.orderId}: user ${users[0]}, expected ${buyer.userId}`);
  }
  const perUser = new Map<number, number>();
  for (const r of rows) perUser.set(r.userId, (perUser.get(r.userId) ?? 0) + 1);
  // An order nobody was told about may exist only for a buyer one of whose replies never arrived
  // (or was a 5xx, which says nothing of the outcome); a refusal such as DUPLICATE_ORDER follows a
  // reservation that was acknowledged or whose reply was lost.
  const mayHoldUnannounced = new Set<number>();
  for (const { buyer, outcome } of attempts) if (outcome.kind !== "rejected") mayHoldUnannounced.add(buyer.userId);
  const attempted = new Set(attempts.map((a) => a.buyer.userId));
  const told = new Set<string>();
  const toldHolding = new Map<number, Buyer>();
  for (const { buyer, outcome: o } of attempts) {
    if (o.kind === "ack") told.add(`${buyer.userId}:${o.orderId}`);
    else if (o.kind === "rejected" && o.code === "DUPLICATE_ORDER") {
      if (o.orderId) told.add(`${buyer.userId}:${o.orderId}`);
      else toldHolding.set(buyer.userId, buyer);
    }
  }
  const untoldRows = rows.filter((r) => attempted.has(r.userId) && !told.has(`${r.userId}:${r.id}`));
  return {
    rows,
    missing,
    wrongUser,
    duplicateBuyers: [...perUser].filter(([, n]) => n > 1),
    unannounced: rows
      .filter((r) => attempted.has(r.userId) && !mayHoldUnannounced.has(r.userId))
      .map((r) => `${r.id} (user ${r.userId})`),
    inactive: rows.filter((r) => ![1, 2, 3].includes(r.status)).map((r) => r.id),
    untold: untoldRows.filter((r) => !toldHolding.has(r.userId)).map((r) => `${r.id} (user ${r.userId})`),
    heldWithoutId: untoldRows.flatMap((r) => {
      const buyer = toldHolding.get(r.userId);
      return buyer ? [{ orderId: r.id, buyer }] : [];
    }),
  };
}

export interface StockFindings {
  mysqlStock: number;
  /** Active orders (unpaid, paid, refunding) in MySQL. */
  active: number;
  redis: { stock: number; buyers: number };
  /** Users with an active order who are not in the Redis buyers set. */
  activeNotInBuyers: string[];
  buyerMembers: number;
}

/** Stock on both sides of a voucher with one bucket, sharded or not (see tests/chaos/sale.test.ts for the invariants). */
export async function stockFindings(
  deps: Pick<Deps, "db"> & RedisSide,
  shopId: number,
  voucherId: number,
): Promise<StockFindings> {
  const m = (
    await within(
      10_000,
      "reading MySQL stock",
      deps.db.execute(
        `SELECT (SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?) AS stock,
            (SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ? AND status IN (1, 2, 3)) AS active`,
        [voucherId, voucherId],
      ),
    )
  ).rows[0] as { stock: string; active: string };
  const redis = await within(5_000, "reading Redis stock", redisSide(deps, shopId, voucherId));
  const members = await within(5_000, "Redis buyers", buyerMembersOf(deps, shopId, voucherId));
  const activeRows = await within(
    10_000,
    "active orders",
    deps.db.execute("SELECT user_id FROM tb_voucher_order WHERE voucher_id = ? AND status IN (1, 2, 3)", [voucherId]),
  );
  const activeUsers = (activeRows.rows as { user_id: string }[]).map((x) => String(x.user_id));
  return {
    mysqlStock: Number(m.stock),
    active: Number(m.active),
    redis,
    activeNotInBuyers: activeUsers.filter((u) => !members.has(u)),
    buyerMembers: members.size,
  };
}

/** Runs reconcile now and returns this voucher's line of the report (undefined: not in it). */
export async function reconcileVoucher(deps: Deps, voucherId: number): Promise<VoucherReport | undefined> {
  const report = await within(20_000, "reconcile", reconcile(deps, Date.now()));
  return report.vouchers.find((v: VoucherReport) => v.voucherId === voucherId);
}

/** How a buyer swarm is run (runSwarm). Milliseconds throughout. */
export interface SwarmOptions {
  attemptsPerUser: number;
  /** Requests in flight at most. */
  connections: number;
  requestTimeoutMs: number;
  /** The whole crowd; whatever is still in flight then is answered "lost". */
  swarmTimeoutMs: number;
  /** How long the writer may take to drain after the sale. */
  drainTimeoutMs: number;
  drainPollMs?: number;
}

/** What a buyer swarm saw: every attempt's answer, the Redis side right after the sale, and the drain. */
export interface SwarmRun {
  attempts: Attempt[];
  saleMs: number;
  redisAfterSale: { stock: number; buyers: number };
  drained: boolean;
  /** The last outbox / MySQL / Redis figures seen while waiting for the drain. */
  drainNote: string;
}

/**
 * A buyer swarm on `baseUrl`'s seckill voucher: each buyer's attempts are queued next to each other
 * (so they are in flight together), at most `connections` at once. Then waits for the writer to
 * drain through QStash into MySQL (outbox empty, one MySQL row per Redis buyer); a drain that does
 * not finish in time is reported (`drained: false`), not thrown, so the checks can say what is wrong.
 */
export async function runSwarm(
  baseUrl: string,
  deps: Pick<Deps, "db"> & RedisSide,
  sale: { shopId: number; voucherId: number },
  buyers: readonly Buyer[],
  opts: SwarmOptions,
): Promise<SwarmRun> {
  const { shopId, voucherId } = sale;
  const run = limiter(opts.connections);
  const stopAll = new AbortController();
  const attempts: Attempt[] = [];
  const started = performance.now();
  const crowd = buyers.flatMap((buyer) =>
    Array.from({ length: opts.attemptsPerUser }, () =>
      run(async () => {
        const outcome = await buy(baseUrl, voucherId, buyer, {
          timeoutMs: opts.requestTimeoutMs,
          signal: stopAll.signal,
        });
        attempts.push({ buyer, outcome });
      }),
    ),
  );
  try {
    await within(opts.swarmTimeoutMs, "the swarm", Promise.all(crowd));
  } finally {
    stopAll.abort(); // whatever is still in flight past the deadline is answered "lost"
    await Promise.allSettled(crowd);
  }
  const saleMs = Math.round(performance.now() - started);
  const redisAfterSale = await within(10_000, "reading Redis stock", redisSide(deps, shopId, voucherId));

  let drained = true;
  let drainNote = "";
  await pollUntil(
    "the writer to drain: outbox empty and one MySQL row per Redis buyer",
    async () => {
      const [outbox, rows, { buyers: taken }] = await Promise.all([
        outboxSize(deps, shopId),
        mysqlOrderCount(deps, voucherId),
        redisSide(deps, shopId, voucherId),
      ]);
      drainNote = `outbox=${outbox} mysqlRows=${rows} redisBuyers=${taken}`;
      return outbox === 0 && rows === taken;
    },
    opts.drainTimeoutMs,
    opts.drainPollMs ?? 100,
  ).catch(() => {
    drained = false;
  });
  return { attempts, saleMs, redisAfterSale, drained, drainNote };
}

/** A swarm's figures for the test log: answers by kind and by status:code, sale time, the drain. */
export function swarmFigures(r: SwarmRun): string {
  const count = (k: Outcome["kind"]) => r.attempts.filter((a) => a.outcome.kind === k).length;
  const codes = new Map<string, number>();
  for (const { outcome: o } of r.attempts) {
    const key =
      o.kind === "ack"
        ? "ack"
        : o.kind === "rejected"
          ? `${o.status}:${o.code}`
          : o.kind === "error"
            ? `${o.status}${o.code ? `:${o.code}` : ""}`
            : "lost";
    codes.set(key, (codes.get(key) ?? 0) + 1);
  }
  return (
    `attempts=${r.attempts.length} acks=${count("ack")} rejected=${count("rejected")} 5xx=${count("error")} lost=${count("lost")} ` +
    `saleMs=${r.saleMs} redisAfterSale=${JSON.stringify(r.redisAfterSale)} drained=${r.drained} (${r.drainNote}) answers=${JSON.stringify(Object.fromEntries(codes))} ` +
    `devProxyRetriesSoFar=${devProxy.retried}`
  );
}

/** Exactly `units` attempts answered with an order id (distinct ids, distinct buyers), no 5xx, none unanswered. */
export function expectUnitsAcknowledged(attempts: readonly Attempt[], units: number): void {
  const acks = attempts.flatMap((a) =>
    a.outcome.kind === "ack" ? [{ orderId: a.outcome.orderId, userId: a.buyer.userId }] : [],
  );
  const fiveXX = attempts.filter((a) => a.outcome.kind === "error");
  const lost = attempts.filter((a) => a.outcome.kind === "lost");
  expect({
    acknowledged: acks.length,
    distinctOrderIds: new Set(acks.map((a) => a.orderId)).size,
    distinctBuyers: new Set(acks.map((a) => a.userId)).size,
    "5xx": fiveXX.length,
    unanswered: lost.length,
    firstErrors: [...fiveXX, ...lost].slice(0, 3).map((a) => JSON.stringify(a.outcome)),
  }).toEqual({
    acknowledged: units,
    distinctOrderIds: units,
    distinctBuyers: units,
    "5xx": 0,
    unanswered: 0,
    firstErrors: [],
  });
}

/** The swarm's writer drained, and every acknowledged order is in MySQL once with its buyer (expectEveryOrderOnce). */
export async function expectSwarmDrained(
  deps: Pick<Deps, "db">,
  voucherId: number,
  r: SwarmRun,
  units: number,
): Promise<void> {
  const found = await orderFindings(deps, voucherId, r.attempts);
  expect({ drained: r.drained, drainNote: r.drained ? "" : r.drainNote }).toEqual({ drained: true, drainNote: "" });
  expectEveryOrderOnce(found, units);
}

/** Stock conserved right after the swarm (Redis) and now (expectStockConserved). */
export async function expectSwarmStockConserved(
  deps: Pick<Deps, "db"> & RedisSide,
  sale: { shopId: number; voucherId: number },
  r: SwarmRun,
  units: number,
): Promise<void> {
  const st = await stockFindings(deps, sale.shopId, sale.voucherId);
  expect(r.redisAfterSale.stock + r.redisAfterSale.buyers).toBe(units);
  expectStockConserved(st, units);
}

/** A swarm on one sale, as the checks below read it (`logMark`: the server log's size before the sale). */
export interface SaleSwarm extends SwarmRun {
  shopId: number;
  voucherId: number;
  logMark: number;
}

/**
 * The checks every buyer-swarm file makes after its sale, as four tests: `units` acknowledged and
 * nothing else broken (expectUnitsAcknowledged), the drain (expectSwarmDrained), stock
 * (expectSwarmStockConserved), and no workerd hazard line in `server`'s log since the sale.
 * `guarded` wraps each body (the file's log-tail reporter); `swarm` throws when the sale did not run.
 */
export function swarmCheckTests(opts: {
  units: number;
  server: string;
  guarded: (fn: () => Promise<void>) => () => Promise<void>;
  swarm: () => SaleSwarm;
  driver: () => Deps;
  logSince: (mark: number) => string;
}): void {
  const { units, guarded, swarm } = opts;
  test(
    `exactly ${units} attempts answered with an order id (distinct ids, distinct buyers), no 5xx, none unanswered`,
    guarded(async () => expectUnitsAcknowledged(swarm().attempts, units)),
    10_000,
  );
  test(
    "every acknowledged order is in MySQL exactly once with its buyer (drained via QStash); no buyer holds an order they were told they lack",
    guarded(async () => expectSwarmDrained(opts.driver(), swarm().voucherId, swarm(), units)),
    60_000,
  );
  test(
    "stock is conserved in MySQL and in Redis, and the Redis buyers are exactly the users with orders",
    guarded(async () => expectSwarmStockConserved(opts.driver(), swarm(), swarm(), units)),
    60_000,
  );
  test(
    `the ${opts.server} logged no "different request context", "hung" or "canceled" report during the sale`,
    guarded(async () => expectNoHazardLines(opts.logSince(swarm().logMark))),
    10_000,
  );
}

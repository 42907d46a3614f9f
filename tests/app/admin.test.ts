/**
 * /admin and /console are two renderings of the same typed snapshots (services/ops.ts,
 * services/vouchers.ts): the JSON answers what the pages show, and each answer is what the
 * reference documents (the zod schemas of src/openapi/operator.ts, parsed against real answers).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { z } from "zod";
import { SESSION_COOKIE } from "../../src/console/session.ts";
import * as S from "../../src/openapi/operator.ts";
import { findReservation, writeOrder } from "../../src/services/seckill/orders.ts";
import { RETIRE_AFTER_MS } from "../../src/services/seckill/registry.ts";
import { homeShard } from "../../src/services/seckill/shards.ts";
import { toSqlUtc } from "../../src/util/time.ts";
import { call } from "../support/http.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { getShardStack } from "../support/shards.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";

let t: TestApp;
let token: string;
beforeAll(async () => {
  t = await createTestApp();
  token = `Bearer ${t.deps.config.ADMIN_TOKEN}`;
});

async function cookieOf(app: TestApp): Promise<string> {
  const res = await app.app.request("/console/login", {
    method: "POST",
    headers: {
      "content-type": "application/x-www-form-urlencoded",
      origin: new URL(app.deps.config.PUBLIC_URL).origin,
    },
    body: `token=${encodeURIComponent(app.deps.config.ADMIN_TOKEN)}`,
  });
  return `${SESSION_COOKIE}=${/cityhub_console=([^;]+)/.exec(res.headers.get("set-cookie") ?? "")?.[1] ?? ""}`;
}

/** GET an admin route; its `data` must parse with the schema the reference documents for it. */
async function snapshot<S extends z.ZodType>(app: TestApp, path: string, schema: S): Promise<z.output<S>> {
  const res = await call(app.app, "GET", path, { token: `Bearer ${app.deps.config.ADMIN_TOKEN}` });
  expect([path, res.status]).toEqual([path, 200]);
  const parsed = schema.safeParse(res.body.data);
  if (!parsed.success) throw new Error(`${path}: answer does not fit its documented schema: ${parsed.error.message}`);
  return parsed.data;
}

describe("operator snapshots as JSON", () => {
  test("GET /admin/sales lists a sale with its Redis stock and state, as the console's sales page does", async () => {
    const sale = await createSeckill(t, { stock: 5 });
    const [uid] = userIds(1);
    const [user] = await sessionsFor(t, [uid ?? 0]);
    expect(
      (await call(t.app, "POST", `/api/voucher-order/seckill/${sale.voucherId}`, { token: user ?? "" })).body.success,
    ).toBe(true);
    const rows = await snapshot(t, "/admin/sales", S.SaleRow.array());
    expect(rows.find((r) => r.voucherId === sale.voucherId)).toMatchObject({
      shopId: sale.shopId,
      initial: 5,
      stockLeft: 4,
      state: "on sale",
    });
    const html = await (await t.app.request("/console", { headers: { cookie: await cookieOf(t) } })).text();
    expect(html).toMatch(
      new RegExp(`>${sale.voucherId}</a></td><td class="n">${sale.shopId}</td><td class="n">4 / 5</td>`),
    );
  });

  test("GET /admin/vouchers lists the newest vouchers with a seckill's stock and window", async () => {
    const sale = await createSeckill(t, { stock: 3 });
    const rows = await snapshot(t, "/admin/vouchers", S.VoucherRow.array());
    const row = rows.find((r) => r.id === sale.voucherId);
    expect(row).toMatchObject({ shopId: sale.shopId, type: 1, stock: 3, state: "on sale" });
    expect(row?.endMs ?? 0).toBeGreaterThan(row?.beginMs ?? Infinity);
  });

  test("GET /admin/orders finds a queued order by id and a written one by user; exactly one of id and userId", async () => {
    const sale = await createSeckill(t, { stock: 2 });
    const [uid] = userIds(1);
    const [user] = await sessionsFor(t, [uid ?? 0]);
    const orderId =
      (await call<string>(t.app, "POST", `/api/voucher-order/seckill/${sale.voucherId}`, { token: user ?? "" })).body
        .data ?? "";
    const queued = await snapshot(t, `/admin/orders?id=${orderId}`, S.OrderView.array());
    expect(queued).toEqual([
      expect.objectContaining({ id: orderId, userId: uid, voucherId: sale.voucherId, status: "queued", paidAt: null }),
    ]);
    const r = await findReservation(t.deps, orderId);
    if (r) await writeOrder(t.deps, r);
    const byUser = await snapshot(t, `/admin/orders?userId=${uid}`, S.OrderView.array());
    expect(byUser.map((o) => [o.id, o.status])).toEqual([[orderId, "unpaid"]]);
    expect(await snapshot(t, "/admin/orders?id=9223372036854775807", S.OrderView.array())).toEqual([]);
    for (const q of ["", `?id=${orderId}&userId=${uid}`, "?id=abc", "?userId=0"]) {
      expect([q, (await call(t.app, "GET", `/admin/orders${q}`, { token })).status]).toEqual([q, 400]);
    }
  });

  test("GET /admin/ops answers with every section; with Redis's breaker open, from memory, the Redis-backed sections named as unavailable (as the console's page)", async () => {
    const healthy = await snapshot(t, "/admin/ops", S.OpsSnapshot);
    expect(healthy.unavailable).toEqual([]);
    expect(Object.keys(healthy.breakers).sort()).toEqual(["mysql", "payments", "qstash", "redis", "sms"]);
    const b = await createTestApp({ BREAKER_MIN_CALLS: "6", BREAKER_HALF_OPEN_AFTER_MS: "60000" });
    const guard = b.deps.isolate.resilience.redis;
    for (let i = 0; i < 2; i++)
      await expect(guard.run(() => Promise.reject(new Error("connect ECONNREFUSED (injected)")))).rejects.toThrow(
        "redis unavailable",
      );
    const down = await snapshot(b, "/admin/ops", S.OpsSnapshot);
    expect(down.breakers.redis).toMatchObject({ state: "open", failures: 2 });
    expect(down.unavailable.map((u) => u.section)).toEqual(
      expect.arrayContaining(["reconcile report", "cache hit rates and hot keys", "unique visitors"]),
    );
    expect(down.unavailable.find((u) => u.section === "reconcile report")?.error).toBe(
      "redis unavailable (circuit open)",
    );
    expect(down.reconcile).toBeNull();
  });

  test("the other operator routes answer what their schemas document", async () => {
    await snapshot(t, "/admin/resilience", S.Breakers);
    await snapshot(t, "/admin/cache", S.CacheReport);
    await snapshot(t, "/admin/cache/hot", S.HotReportOrOff);
    await snapshot(t, "/admin/orders/pipeline", S.PipelineBacklog);
    await snapshot(t, "/admin/reconcile", S.ReconcileReportOrNone);
    await snapshot(t, "/admin/refunds", S.RefundOut.array());
    await snapshot(t, "/admin/dlq?count=5", S.DeadLetterPage);
    const run = await call(t.app, "POST", "/admin/reconcile", { token });
    if (run.status === 200) expect(S.ReconcileReport.safeParse(run.body.data).success).toBe(true);
  });
});

/** Sends a seckill attempt for each token; every one must be answered with an order id. */
async function reserveAs(app: TestApp, voucherId: number, tokens: readonly string[]): Promise<void> {
  for (const token of tokens) {
    const res = await call<string>(app.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token });
    expect([res.status, res.body.success]).toEqual([200, true]);
  }
  await app.settle();
}

describe("the operator credential", () => {
  test("is accepted only as `Authorization: Bearer <ADMIN_TOKEN>` (scheme in any case): the bare token is refused like a wrong one", async () => {
    const app = await createTestApp({ OPERATOR_AUTH_FAILURES: "0" });
    const secret = app.deps.config.ADMIN_TOKEN;
    const status = async (authorization: string) =>
      (await call(app.app, "GET", "/admin/cache", { token: authorization })).status;
    expect(await status(`Bearer ${secret}`)).toBe(200);
    expect(await status(`bearer ${secret}`)).toBe(200);
    for (const bad of [secret, ` ${secret}`, `Basic ${secret}`, `Bearer${secret}`, `Token ${secret}`]) {
      const res = await call(app.app, "GET", "/admin/cache", { token: bad });
      expect([bad, res.status, res.body.code]).toEqual([bad, 401, "UNAUTHORIZED"]);
    }
    // The operator's view of /health likewise.
    const health = async (authorization: string) =>
      Object.keys((await call<object>(app.app, "GET", "/health", { token: authorization })).body.data ?? {}).sort();
    expect(await health(`Bearer ${secret}`)).not.toEqual(await health("wrong"));
    expect(await health(secret)).toEqual(await health("wrong"));
  });
});

describe("GET /admin/seckill/{voucherId}", () => {
  test("an unsharded sale: window and stock, one entry (shard 0) with its stock, buyers and share, sold, MySQL's side, and its own reservations waiting in the outbox", async () => {
    const sale = await createSeckill(t, { stock: 5, buckets: 2 });
    // Another sale of the same shop: its reservation is in the same outbox, but not this voucher's.
    const other = await createSeckill(t, { stock: 3, shopId: sale.shopId });
    const tokens = await sessionsFor(t, userIds(3));
    await reserveAs(t, sale.voucherId, tokens.slice(0, 2));
    await reserveAs(t, other.voucherId, tokens.slice(2));
    const v = await snapshot(t, `/admin/seckill/${sale.voucherId}`, S.SeckillView);
    expect(v).toMatchObject({
      voucherId: sale.voucherId,
      shopId: sale.shopId,
      initialStock: 5,
      buckets: 2,
      shardCount: 0,
      state: "on sale",
      stock: 3,
      buyers: 2,
      sold: 2,
      unaccounted: 0,
      mysqlStock: 5,
      ordersInMysql: 0,
      outboxPending: 2,
    });
    expect(v.endMs).toBeGreaterThan(v.beginMs);
    expect(v.shards).toEqual([
      {
        shard: 0,
        stock: 3,
        buckets: [expect.any(Number), expect.any(Number)],
        buyers: 2,
        share: 5,
        outbox: { pending: 2, shopPending: 3, lagMs: expect.any(Number) },
      },
    ]);
    expect((v.shards[0]?.buckets ?? []).reduce((a, b) => a + b, 0)).toBe(3);
  });

  test("an unknown voucher, or one that is not a seckill voucher, is NOT_FOUND in a 200 envelope; a malformed id is a 400; operators only", async () => {
    const unknown = await call(t.app, "GET", "/admin/seckill/999999999", { token });
    expect([unknown.status, unknown.body.success, unknown.body.code]).toEqual([200, false, "NOT_FOUND"]);
    const normal = await call<number>(t.app, "POST", "/api/voucher", {
      token,
      json: { shopId: (await createSeckill(t, { stock: 1 })).shopId, title: "plain", payValue: 100, actualValue: 200 },
    });
    expect(normal.body.success).toBe(true);
    expect((await call(t.app, "GET", `/admin/seckill/${normal.body.data}`, { token })).body.code).toBe("NOT_FOUND");
    for (const id of ["0", "01", "-1", "1e3", "x"])
      expect([id, (await call(t.app, "GET", `/admin/seckill/${id}`, { token })).status]).toEqual([id, 400]);
    const [user] = await sessionsFor(t, userIds(1));
    expect((await call(t.app, "GET", "/admin/seckill/1", { token: user ?? "" })).status).toBe(401);
    expect((await call(t.app, "GET", "/admin/seckill/1")).status).toBe(401);
  });
});

describe("sharded sales in the operator views", () => {
  const N = 4;
  const created: number[] = [];
  let sharded: TestApp;
  beforeAll(async () => {
    const shards = await getShardStack(N);
    sharded = await createTestApp({
      ...shards.env,
      SECKILL_USER_LIMIT: "0",
      SECKILL_IP_LIMIT: "0",
      ORDER_PAY_TIMEOUT_SECONDS: "86400",
    });
  });
  // Later test files of this process run jobs on apps without these shards: the sales leave the registry.
  afterAll(async () => {
    if (created.length === 0) return;
    const inList = created.map(() => "?").join(", ");
    const end = Date.now() - RETIRE_AFTER_MS - 86_400_000;
    await sharded.deps.db.execute(
      `UPDATE tb_seckill_voucher SET begin_time = ?, end_time = ? WHERE voucher_id IN (${inList})`,
      [toSqlUtc(end - 3_600_000), toSqlUtc(end), ...created],
    );
    await sharded.deps.db.execute(
      `UPDATE tb_voucher_order SET status = 4 WHERE status = 1 AND voucher_id IN (${inList})`,
      created,
    );
  });

  /** `count` fresh users homed in each of shards `homes`. */
  function homedIn(homes: readonly number[], count: number): number[] {
    const out: number[] = [];
    for (const shard of homes) {
      const mine: number[] = [];
      while (mine.length < count)
        for (const u of userIds(20)) if (homeShard(u, N) === shard && mine.length < count) mine.push(u);
      out.push(...mine);
    }
    return out;
  }

  test("GET /admin/seckill/{id}, /admin/sales and /admin/orders/pipeline read every shard: stock, buyers and share per shard, and the reservations waiting in each shard's outbox", async () => {
    const sale = await createSeckill(sharded, { stock: 40 });
    created.push(sale.voucherId);
    await reserveAs(sharded, sale.voucherId, await sessionsFor(sharded, homedIn([0, 1, 2], 2)));

    const v = await snapshot(sharded, `/admin/seckill/${sale.voucherId}`, S.SeckillView);
    expect({
      shardCount: v.shardCount,
      stock: v.stock,
      buyers: v.buyers,
      sold: v.sold,
      unaccounted: v.unaccounted,
      outboxPending: v.outboxPending,
    }).toEqual({
      shardCount: N,
      stock: 34,
      buyers: 6,
      sold: 6,
      unaccounted: 0,
      outboxPending: 6,
    });
    expect(v.shards.map((x) => [x.shard, x.stock, x.buyers, x.share, x.outbox.pending, x.outbox.shopPending])).toEqual([
      [0, 8, 2, 10, 2, 2],
      [1, 8, 2, 10, 2, 2],
      [2, 8, 2, 10, 2, 2],
      [3, 10, 0, 10, 0, 0],
    ]);

    const rows = await snapshot(sharded, "/admin/sales", S.SaleRow.array());
    expect(rows.find((r) => r.voucherId === sale.voucherId)).toMatchObject({
      stockLeft: 34,
      shards: N,
      unreadShards: 0,
      state: "on sale",
    });
    const backlog = await snapshot(sharded, "/admin/orders/pipeline", S.PipelineBacklog);
    const shop = backlog.shops.find((b) => b.shopId === sale.shopId);
    expect({ pending: shop?.pending, shards: shop?.shards.map((x) => [x.shard, x.pending]) }).toEqual({
      pending: 6,
      shards: [
        [0, 2],
        [1, 2],
        [2, 2],
      ],
    });
  });

  test("an app without the voucher's shards says so: GET /admin/seckill/{id} is a 503 naming them, the sales list counts them unread, the backlog skips their outboxes", async () => {
    const sale = await createSeckill(sharded, { stock: 8 });
    created.push(sale.voucherId);
    await reserveAs(sharded, sale.voucherId, await sessionsFor(sharded, homedIn([1], 1)));
    const res = await call(t.app, "GET", `/admin/seckill/${sale.voucherId}`, { token });
    expect([res.status, res.body.code]).toEqual([503, "UNAVAILABLE"]);
    expect(res.body.errorMsg).toContain(`voucher ${sale.voucherId} lives in ${N} seckill shards, 0 configured`);
    const rows = await snapshot(t, "/admin/sales", S.SaleRow.array());
    expect(rows.find((r) => r.voucherId === sale.voucherId)).toMatchObject({
      stockLeft: 0,
      shards: N,
      unreadShards: N,
    });
    const backlog = await snapshot(t, "/admin/orders/pipeline", S.PipelineBacklog);
    expect(backlog.shops.find((b) => b.shopId === sale.shopId)).toBeUndefined();
  });
});

/**
 * /admin and /console are two renderings of the same typed snapshots (services/ops.ts,
 * services/vouchers.ts): the JSON answers what the pages show, and each answer is what the
 * reference documents (the zod schemas of src/openapi/operator.ts, parsed against real answers).
 */
import { beforeAll, describe, expect, test } from "bun:test";
import type { z } from "zod";
import { SESSION_COOKIE } from "../../src/console/session.ts";
import * as S from "../../src/openapi/operator.ts";
import { findReservation, writeOrder } from "../../src/services/seckill/orders.ts";
import { call } from "../support/http.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";

let t: TestApp;
let token: string;
beforeAll(async () => {
  t = await createTestApp();
  token = `Bearer ${t.deps.config.ADMIN_TOKEN}`;
});

async function cookieOf(app: TestApp): Promise<string> {
  const res = await app.app.request("/console/login", { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded", origin: "http://localhost" }, body: `token=${encodeURIComponent(app.deps.config.ADMIN_TOKEN)}` });
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
    expect((await call(t.app, "POST", `/api/voucher-order/seckill/${sale.voucherId}`, { token: user ?? "" })).body.success).toBe(true);
    const rows = await snapshot(t, "/admin/sales", S.SaleRow.array());
    expect(rows.find((r) => r.voucherId === sale.voucherId)).toMatchObject({ shopId: sale.shopId, initial: 5, stockLeft: 4, state: "on sale" });
    const html = await (await t.app.request("/console", { headers: { cookie: await cookieOf(t) } })).text();
    expect(html).toMatch(new RegExp(`>${sale.voucherId}</a></td><td class="n">${sale.shopId}</td><td class="n">4 / 5</td>`));
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
    const orderId = (await call<string>(t.app, "POST", `/api/voucher-order/seckill/${sale.voucherId}`, { token: user ?? "" })).body.data ?? "";
    const queued = await snapshot(t, `/admin/orders?id=${orderId}`, S.OrderView.array());
    expect(queued).toEqual([expect.objectContaining({ id: orderId, userId: uid, voucherId: sale.voucherId, status: "queued", paidAt: null })]);
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
    const b = await createTestApp({ BREAKER_THRESHOLD: "2", BREAKER_HALF_OPEN_AFTER_MS: "60000" });
    const guard = b.deps.isolate.resilience.redis;
    for (let i = 0; i < 2; i++) await expect(guard.run(() => Promise.reject(new Error("connect ECONNREFUSED (injected)")))).rejects.toThrow("redis unavailable");
    const down = await snapshot(b, "/admin/ops", S.OpsSnapshot);
    expect(down.breakers.redis).toMatchObject({ state: "open", failures: 2 });
    expect(down.unavailable.map((u) => u.section)).toEqual(expect.arrayContaining(["reconcile report", "cache hit rates and hot keys", "unique visitors"]));
    expect(down.unavailable.find((u) => u.section === "reconcile report")?.error).toBe("redis unavailable (circuit open)");
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

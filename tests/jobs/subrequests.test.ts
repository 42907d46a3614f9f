/**
 * Workers subrequest limits (src/ports/subrequests.ts) on the real engines: every fetch the app
 * makes to the Upstash REST, PlanetScale HTTP and QStash stand-ins is counted at the global
 * `fetch` — the same thing Cloudflare counts per invocation — while one invocation runs:
 *   - a drain delivery (POST ORDER_DRAIN_PATH, signed, with the edge's background work and
 *     waitUntil settled) over a backlog far larger than one invocation may write;
 *   - a close of as many vouchers as one close message may carry;
 *   - cron triggers over a backlog of expired orders.
 * WORKERS_SUBREQUEST_LIMIT is set to the Free plan's 50 so that small backlogs exceed it (unset,
 * Bun has no limit; workerd's default is 1,000).
 */
import { describe, expect, test } from "bun:test";
import { invocationCap } from "../../src/ports/subrequests.ts";
import { MIN_JOB_SHARE, runCron } from "../../src/jobs/index.ts";
import { keys } from "../../src/redis/keys.ts";
import { closeCost, closeOrders, closeVouchersPerInvocation } from "../../src/services/seckill/close.ts";
import { reserve } from "../../src/services/seckill/reserve.ts";
import { toSqlUtc } from "../../src/util/time.ts";
import { type DrainResult, drainShop, groupCost } from "../../src/services/seckill/writer.ts";
import type { Stack } from "../../scripts/stack/index.ts";
import { call } from "../support/http.ts";
import { qstashSignature } from "../support/qstash-sign.ts";
import { createSeckill, mysqlCounts, userIds } from "../support/seckill.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";
import { ORDER_DRAIN_PATH } from "../../src/queue/messages.ts";

const LIMIT = 50;
const ENV = {
  WORKERS_SUBREQUEST_LIMIT: String(LIMIT),
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: "0",
  SOLD_OUT_MEMO_MS: "0",
} as const;

interface Calls {
  redis: number;
  mysql: number;
  qstash: number;
  total: number;
}

/**
 * Runs `fn` with the global fetch counted per stand-in (other destinations — QStash delivering to
 * the app's PUBLIC_URL — are not the app's subrequests). The stand-ins run in this process, so
 * nothing else may talk to them meanwhile: the tests run one invocation at a time.
 */
async function counted<T>(stack: Stack, fn: () => Promise<T>): Promise<{ value: T; calls: Calls }> {
  const origin = (u: string) => new URL(u).origin;
  const targets = {
    redis: origin(stack.env.UPSTASH_REDIS_REST_URL as string),
    mysql: origin(stack.env.DATABASE_URL as string),
    qstash: origin(stack.env.QSTASH_URL as string),
  };
  const calls: Calls = { redis: 0, mysql: 0, qstash: 0, total: 0 };
  const real = globalThis.fetch;
  const wrapped = (input: RequestInfo | URL, init?: RequestInit) => {
    const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
    const o = origin(url);
    for (const k of ["redis", "mysql", "qstash"] as const) {
      if (o === targets[k]) {
        calls[k]++;
        calls.total++;
      }
    }
    return real(input, init);
  };
  globalThis.fetch = Object.assign(wrapped, real) as typeof fetch;
  try {
    return { value: await fn(), calls };
  } finally {
    globalThis.fetch = real;
  }
}

async function reserveAll(t: TestApp, plan: { voucherId: number; users: number[] }[]): Promise<void> {
  const jobs = plan.flatMap(({ voucherId, users }) => users.map((userId) => ({ voucherId, userId })));
  const res = await Promise.all(jobs.map((j) => reserve(t.deps, { ...j, ip: "10.0.0.1" })));
  expect(res.every((r) => r.ok)).toBe(true);
  await t.settle();
}

async function outboxSize(t: TestApp, shopId: number): Promise<number> {
  return await t.deps.redis.hlen(keys.seckill.outbox(shopId));
}

/** One drain delivery through the real route (signature checked), its background work settled. */
async function deliverDrain(t: TestApp, shopId: number): Promise<{ res: DrainResult; calls: Calls }> {
  const body = JSON.stringify({ shopId });
  const signature = await qstashSignature({
    key: t.deps.config.QSTASH_CURRENT_SIGNING_KEY,
    url: `${t.deps.config.PUBLIC_URL}${ORDER_DRAIN_PATH}`,
    body,
  });
  const { value, calls } = await counted(t.stack, async () => {
    const r = await call<DrainResult>(t.app, "POST", ORDER_DRAIN_PATH, {
      body,
      headers: { "content-type": "application/json", "upstash-signature": signature },
    });
    await t.settle();
    return r;
  });
  expect(value.status).toBe(200);
  return { res: value.body.data as DrainResult, calls };
}

describe("the order drain stays within one invocation's subrequests", () => {
  test("a backlog of 12 groups (WORKERS_SUBREQUEST_LIMIT 50): every delivery makes at most 50 subrequests, stops at the cap and hands on; the continuations write every order exactly once", async () => {
    const t = await createTestApp({ ...ENV, ORDER_GROUP_MAX: "10" });
    const { shopId, voucherId } = await createSeckill(t, { stock: 120 });
    await reserveAll(t, [{ voucherId, users: userIds(120) }]);
    expect(await outboxSize(t, shopId)).toBe(120);
    const cap = invocationCap(t.deps);
    // Unbounded, this one delivery would make 12 × groupCost(1) + 2 (the last, empty claim and the follow-up) = 86.
    expect(12 * groupCost(1) + 2).toBeGreaterThan(LIMIT);

    const deliveries: { res: DrainResult; calls: Calls }[] = [];
    while ((await outboxSize(t, shopId)) > 0) {
      expect(deliveries.length).toBeLessThan(10);
      deliveries.push(await deliverDrain(t, shopId));
    }
    for (const { res, calls } of deliveries) {
      // The platform's limit holds for the whole invocation, background work included ...
      expect(calls.total).toBeLessThanOrEqual(LIMIT);
      // ... and the drain's own metered calls for the cap (the limit minus its headroom).
      // (On Bun, commands of one tick may share one request: the meter counts each, so it may read
      // a little above what was sent; on workerd, where auto-pipelining is off, they are equal.)
      expect(res.subrequests).toBeLessThanOrEqual(cap);
    }
    // Each delivery but the last stopped at the subrequest budget and published its continuation
    // (the last may too, when the budget ran out just as the outbox did: its continuation is empty).
    expect(deliveries.length).toBeGreaterThanOrEqual(2);
    for (const { res } of deliveries.slice(0, -1))
      expect(res).toMatchObject({ continued: true, stoppedBy: "subrequests" });
    // A stopped delivery used most of its budget: it is a cap, not a trickle.
    expect(deliveries[0]?.res.subrequests).toBeGreaterThan(cap - 2 * groupCost(1));
    expect(deliveries.reduce((n, d) => n + d.res.created, 0)).toBe(120);
    expect(await mysqlCounts(t, voucherId)).toEqual({ orders: 120, active: 120, stock: 0 });
    console.log(
      `[subrequests] drain, 120 orders in groups of 10, limit ${LIMIT} (cap ${cap}): ${deliveries
        .map(
          (d) =>
            `${d.res.groups} groups / ${d.calls.total} subrequests (redis ${d.calls.redis}, mysql ${d.calls.mysql}, qstash ${d.calls.qstash}; metered ${d.res.subrequests})`,
        )
        .join("; ")}`,
    );
  });

  test("one group spanning more vouchers than fit is written voucher by voucher; the rest is handed back and written by the continuation", async () => {
    const t = await createTestApp({ ...ENV, ORDER_GROUP_MAX: "60" });
    const first = await createSeckill(t, { stock: 5 });
    const vouchers = [
      first,
      ...(await Promise.all(Array.from({ length: 11 }, () => createSeckill(t, { stock: 5, shopId: first.shopId })))),
    ];
    await reserveAll(
      t,
      vouchers.map((v) => ({ voucherId: v.voucherId, users: userIds(5) })),
    );
    const shopId = first.shopId;
    expect(await outboxSize(t, shopId)).toBe(60);
    // One group of 60 spans 12 vouchers: groupCost(12) = 51 subrequests, more than the whole limit.
    expect(groupCost(12)).toBeGreaterThan(LIMIT);

    const one = await deliverDrain(t, shopId);
    expect(one.calls.total).toBeLessThanOrEqual(LIMIT);
    expect(one.res).toMatchObject({ groups: 1, continued: true, stoppedBy: "subrequests" });
    expect(one.res.created).toBeGreaterThan(0);
    expect(one.res.created).toBeLessThan(60);
    expect(one.res.created % 5).toBe(0);
    // What was not written was handed back (claimable now), not left under the claim's lease.
    expect(await outboxSize(t, shopId)).toBe(60 - one.res.created);
    const due = await t.deps.redis.zcount(keys.seckill.outboxDue(shopId), "-inf", Date.now());
    expect(due).toBe(60 - one.res.created);

    const rest: { res: DrainResult; calls: Calls }[] = [];
    while ((await outboxSize(t, shopId)) > 0) {
      expect(rest.length).toBeLessThan(5);
      rest.push(await deliverDrain(t, shopId));
    }
    for (const d of rest) expect(d.calls.total).toBeLessThanOrEqual(LIMIT);
    for (const v of vouchers) expect(await mysqlCounts(t, v.voucherId)).toEqual({ orders: 5, active: 5, stock: 0 });
    console.log(
      `[subrequests] drain, one group over 12 vouchers, limit ${LIMIT}: ${[one, ...rest].map((d) => `${d.res.created} orders / ${d.calls.total} subrequests`).join("; ")}`,
    );
  });

  test("at 1,000 (workerd's default; Paid) the same backlog is one delivery", async () => {
    const t = await createTestApp({ ...ENV, WORKERS_SUBREQUEST_LIMIT: "1000", ORDER_GROUP_MAX: "10" });
    const { shopId, voucherId } = await createSeckill(t, { stock: 120 });
    await reserveAll(t, [{ voucherId, users: userIds(120) }]);
    const d = await deliverDrain(t, shopId);
    expect(d.res).toMatchObject({ groups: 12, created: 120, continued: false });
    // 12 groups of groupCost(1), the last (empty) claim per lane, the next window's announcement.
    expect(d.calls.total).toBeLessThanOrEqual(12 * groupCost(1) + 2 + 1 + 4);
    expect(await mysqlCounts(t, voucherId)).toEqual({ orders: 120, active: 120, stock: 0 });
    console.log(
      `[subrequests] drain, 120 orders in groups of 10, limit 1000: one delivery, ${d.calls.total} subrequests (redis ${d.calls.redis}, mysql ${d.calls.mysql}, qstash ${d.calls.qstash})`,
    );
  });
});

describe("closes and cron runs stay within one invocation", () => {
  test("a close of closeVouchersPerInvocation vouchers (what one close message carries) costs at most closeCost of them", async () => {
    const t = await createTestApp(ENV);
    const per = closeVouchersPerInvocation(t.deps);
    expect(per).toBe(Math.floor((invocationCap(t.deps) - 6) / 9));
    const first = await createSeckill(t, { stock: 3 });
    const vouchers = [
      first,
      ...(await Promise.all(
        Array.from({ length: per - 1 }, () => createSeckill(t, { stock: 3, shopId: first.shopId })),
      )),
    ];
    // Two orders of each voucher written, one left in the outbox: both kinds of close in one call.
    await reserveAll(
      t,
      vouchers.map((v) => ({ voucherId: v.voucherId, users: userIds(2) })),
    );
    while ((await outboxSize(t, first.shopId)) > 0) await drainShop(t.deps, first.shopId);
    await reserveAll(
      t,
      vouchers.map((v) => ({ voucherId: v.voucherId, users: userIds(1) })),
    );
    const inMysql = (
      await t.deps.db.execute(
        `SELECT id FROM tb_voucher_order WHERE voucher_id IN (${vouchers.map(() => "?").join(", ")})`,
        vouchers.map((v) => v.voucherId),
      )
    ).rows.map((r) => String((r as { id: string }).id));
    const inOutbox = Object.keys((await t.deps.redis.hgetall(keys.seckill.outbox(first.shopId))) ?? {});
    expect([inMysql.length, inOutbox.length]).toEqual([2 * per, per]);
    const ids = [...inMysql, ...inOutbox];
    // A fresh isolate (its seckill configuration L1 empty): the close's worst case.
    const fresh = await createTestApp(ENV);
    const { value, calls } = await counted(t.stack, async () => {
      const r = await closeOrders(fresh.deps, ids, { shopId: first.shopId, deadlineMs: Date.now() + 86_400_000 });
      await fresh.settle();
      return r;
    });
    expect(value.cancelled + value.cancelledBeforeWrite).toBe(3 * per);
    expect(value.cancelledBeforeWrite).toBe(per);
    expect(calls.total).toBeLessThanOrEqual(closeCost(per));
    expect(calls.total).toBeLessThanOrEqual(LIMIT);
    // The written ones gave their MySQL stock back; the outbox-only ones never took any.
    for (const v of vouchers) expect(await mysqlCounts(t, v.voucherId)).toEqual({ orders: 3, active: 0, stock: 3 });
    console.log(
      `[subrequests] close of ${per} vouchers × 3 orders: ${calls.total} subrequests (bound closeCost(${per}) = ${closeCost(per)})`,
    );
  });

  test("cron triggers over a backlog of expired orders in several vouchers: each trigger makes at most 50 subrequests, the jobs take turns, and the backlog is closed over the runs", async () => {
    const t = await createTestApp(ENV);
    const first = await createSeckill(t, { stock: 4 });
    const vouchers = [
      first,
      ...(await Promise.all(Array.from({ length: 5 }, () => createSeckill(t, { stock: 4, shopId: first.shopId })))),
    ];
    await reserveAll(
      t,
      vouchers.map((v) => ({ voucherId: v.voucherId, users: userIds(4) })),
    );
    while ((await outboxSize(t, first.shopId)) > 0) await drainShop(t.deps, first.shopId);
    await t.settle();
    // A day later every order is past its payment deadline: 24 orders over 6 vouchers to close —
    // and every other unpaid order this process's tests left (close-expired takes the oldest first).
    let now = Date.now() + 86_400_000 + 60_000;
    const expiredVouchers = async () => {
      const row = (
        await t.deps.db.execute(
          "SELECT COUNT(DISTINCT voucher_id) AS n FROM tb_voucher_order WHERE status = 1 AND create_time < ?",
          [toSqlUtc(now - 86_400_000)],
        )
      ).rows[0] as { n: string };
      return Number(row.n);
    };
    // Close-expired closes at least one voucher's orders per run and runs in 3 of every 4 triggers here.
    const bound = Math.ceil(((await expiredVouchers()) * 4) / 3) + 4;
    const runs: { calls: Calls; ran: string[] }[] = [];
    const unpaid = async () =>
      (await Promise.all(vouchers.map((v) => mysqlCounts(t, v.voucherId)))).reduce((n, c) => n + c.active, 0);
    while ((await unpaid()) > 0) {
      expect(runs.length).toBeLessThan(bound);
      const before = await expiredVouchers();
      const { value, calls } = await counted(t.stack, async () => {
        const r = await runCron(t.deps, "* * * * *", now);
        await t.settle();
        return r;
      });
      expect(value.every((r) => r.ok)).toBe(true);
      const ran = value.filter((r) => !r.skipped).map((r) => r.name);
      if (ran.includes("close-expired")) expect(await expiredVouchers()).toBeLessThan(before);
      runs.push({ calls, ran });
      now += 60_000;
    }
    for (const r of runs) {
      expect(r.calls.total).toBeLessThanOrEqual(LIMIT);
      // Four jobs do not fit 50 subrequests with a useful share each: they take turns.
      expect(r.ran.length).toBe(Math.floor(invocationCap(t.deps) / MIN_JOB_SHARE));
      expect(r.ran.length).toBeLessThan(4);
    }
    expect(runs.length).toBeGreaterThanOrEqual(2);
    for (const v of vouchers) expect(await mysqlCounts(t, v.voucherId)).toEqual({ orders: 4, active: 0, stock: 4 });
    const max = Math.max(...runs.map((r) => r.calls.total));
    console.log(
      `[subrequests] cron, limit ${LIMIT}: ${runs.length} triggers, at most ${max} subrequests each; first four: ${runs
        .slice(0, 4)
        .map((r) => `[${r.ran.join(", ")}] ${r.calls.total}`)
        .join("; ")}`,
    );
  });
});

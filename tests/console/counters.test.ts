import { describe, expect, test } from "bun:test";
import {
  attempts,
  FLUSH_EVERY_MS,
  MAX_FLUSH_VOUCHERS,
  OUTCOMES,
  SALE_COUNTS_TTL_MS,
  SaleCounters,
  saleOutcomes,
} from "../../src/services/sale-counters.ts";
import { keys } from "../../src/redis/keys.ts";
import { Faults } from "../support/faults.ts";
import { call } from "../support/http.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";

/** A voucher id no other test counts (the counters need no voucher row). */
const freshVoucher = () => 8_000_000_000 + Math.floor(Math.random() * 1_000_000_000);

/**
 * Redis commands a test app's (fault-wrapped) client sent, all methods together; `createScript`
 * builds a handle and sends nothing. (No counted path here uses a pipeline, whose commands this
 * would not see.)
 */
const callsOf = (faults: Faults) =>
  [...faults.calls].reduce((n, [k, c]) => (k === "redis.createScript" ? n : n + c), 0);

/** Loads the flush script into Redis (EVALSHA answers NOSCRIPT only the first time): flushes counted afterwards are warm. */
async function warm(t: TestApp): Promise<void> {
  const c = new SaleCounters();
  c.count(freshVoucher(), "ok");
  await c.flush(t.deps);
}

/** An app whose Redis goes through `faults` and whose clock the test moves. */
async function isolate(): Promise<{ t: TestApp; faults: Faults; clock: { ms: number } }> {
  const faults = new Faults();
  const clock = { ms: Date.UTC(2026, 5, 1, 12) };
  const t = await createTestApp({}, { clock: { now: () => clock.ms }, wrap: (deps) => faults.wrap(deps) });
  return { t, faults, clock };
}

describe("sale counters across isolates", () => {
  test("two isolates' attempts at one sale add up in what the console reads once each has flushed", async () => {
    const a = await createTestApp();
    const b = await createTestApp();
    const sale = await createSeckill(a, { stock: 2 });
    const tokens = await sessionsFor(a, userIds(3));
    // Isolate a sells both units; on isolate b a winner's repeat is told DUPLICATE_ORDER, then a newcomer SOLD_OUT.
    for (const token of tokens.slice(0, 2))
      expect((await call(a.app, "POST", `/api/voucher-order/seckill/${sale.voucherId}`, { token })).body.success).toBe(
        true,
      );
    for (const token of [tokens[0], tokens[2]])
      expect(
        (await call(b.app, "POST", `/api/voucher-order/seckill/${sale.voucherId}`, { token: token ?? "" })).body
          .success,
      ).toBe(false);
    await Promise.all([a.settle(), b.settle()]);
    await a.deps.isolate.saleCounters.flush(a.deps);
    await b.deps.isolate.saleCounters.flush(b.deps);

    const want = { ok: 2, SOLD_OUT: 1, DUPLICATE_ORDER: 1, RATE_LIMITED: 0 };
    for (const t of [a, b]) {
      const s = await saleOutcomes(t.deps, sale.voucherId);
      expect(s.counts).toMatchObject(want);
      expect(s.acrossIsolates).toBe(true);
      expect(attempts(s.counts)).toBe(4);
    }
    // Each isolate still knows its own share alone.
    expect(a.deps.isolate.saleCounters.of(sale.voucherId)).toMatchObject({ ok: 2, SOLD_OUT: 0 });
    expect(attempts(b.deps.isolate.saleCounters.of(sale.voucherId))).toBe(2);
  });

  test("the serving isolate's own attempts show before its flush; another isolate's after that isolate's flush", async () => {
    const a = await isolate();
    const b = await isolate();
    const v = freshVoucher();
    for (let i = 0; i < 3; i++) a.t.deps.isolate.saleCounters.count(v, "ok");
    b.t.deps.isolate.saleCounters.count(v, "SOLD_OUT");
    expect((await saleOutcomes(a.t.deps, v)).counts).toMatchObject({ ok: 3, SOLD_OUT: 0 });
    await b.t.deps.isolate.saleCounters.flush(b.t.deps);
    expect((await saleOutcomes(a.t.deps, v)).counts).toMatchObject({ ok: 3, SOLD_OUT: 1 });
    // a's flush moves its share into Redis without counting it twice here, and b now sees it.
    await a.t.deps.isolate.saleCounters.flush(a.t.deps);
    expect((await saleOutcomes(a.t.deps, v)).counts).toMatchObject({ ok: 3, SOLD_OUT: 1 });
    expect((await saleOutcomes(b.t.deps, v)).counts).toMatchObject({ ok: 3, SOLD_OUT: 1 });
  });

  test("a flush is one Redis command for all the vouchers counted, renews their hashes' TTL, and an idle isolate sends none", async () => {
    const { t, faults } = await isolate();
    const c = t.deps.isolate.saleCounters;
    const v = [freshVoucher(), freshVoucher(), freshVoucher()];
    for (const id of v) for (const o of OUTCOMES) c.count(id, o);
    await warm(t);
    const before = callsOf(faults);
    await c.flush(t.deps);
    expect(callsOf(faults) - before).toBe(1);
    for (const id of v) {
      const h = await t.deps.redis.hgetall<Record<string, number>>(keys.seckill.counts(id));
      expect(Object.keys(h ?? {}).sort()).toEqual([...OUTCOMES].sort());
      const ttl = await t.deps.redis.pttl(keys.seckill.counts(id));
      expect(ttl).toBeGreaterThan(SALE_COUNTS_TTL_MS - 60_000);
    }
    expect(c.pending).toBe(0);
    const idle = callsOf(faults);
    await c.flush(t.deps);
    c.maybeFlush(t.deps);
    await t.settle();
    expect(callsOf(faults)).toBe(idle);
  });

  test("background flushes follow the injected clock: at most one per flush period, and only once something was counted", async () => {
    const { t, clock } = await isolate();
    const c = t.deps.isolate.saleCounters;
    const v = freshVoucher();
    const inRedis = async () => Number((await t.deps.redis.hget(keys.seckill.counts(v), "ok")) ?? 0);
    // The first count starts the period: nothing is sent for it at once (a burst's first
    // requests cost no flush), then at most one flush per period.
    c.count(v, "ok");
    c.maybeFlush(t.deps);
    await t.settle();
    expect(await inRedis()).toBe(0);
    clock.ms += FLUSH_EVERY_MS - 1;
    c.maybeFlush(t.deps);
    await t.settle();
    expect(await inRedis()).toBe(0);
    clock.ms += 1;
    c.maybeFlush(t.deps);
    await t.settle();
    expect(await inRedis()).toBe(1);
    c.count(v, "ok");
    clock.ms += FLUSH_EVERY_MS - 1;
    c.maybeFlush(t.deps);
    await t.settle();
    expect(await inRedis()).toBe(1);
    clock.ms += 1;
    c.maybeFlush(t.deps);
    await t.settle();
    expect(await inRedis()).toBe(2);
  });

  test("a failed flush keeps its deltas for the next one, with what was counted since", async () => {
    const { t, faults, clock } = await isolate();
    const c = t.deps.isolate.saleCounters;
    const v = freshVoucher();
    c.count(v, "ok");
    c.count(v, "SOLD_OUT");
    faults.on("redis.evalsha", "fail", { times: 1 });
    await expect(c.flush(t.deps)).rejects.toThrow(/injected fault/);
    expect(await t.deps.redis.exists(keys.seckill.counts(v))).toBe(0);
    expect(c.pending).toBe(1);
    c.count(v, "SOLD_OUT");
    await c.flush(t.deps);
    expect(await t.deps.redis.hgetall(keys.seckill.counts(v))).toMatchObject({ ok: 1, SOLD_OUT: 2 });
    expect(c.unflushed(v)).toMatchObject({ ok: 0, SOLD_OUT: 0 });
    // A background flush that fails is logged and retried by a later one, like this forced one.
    faults.on("redis.evalsha", "fail", { times: 1 });
    c.count(v, "ok");
    c.maybeFlush(t.deps);
    clock.ms += FLUSH_EVERY_MS;
    c.maybeFlush(t.deps);
    await t.settle();
    expect(faults.calls.get("redis.evalsha")).toBe(3);
    expect(c.unflushed(v)).toMatchObject({ ok: 1 });
    await c.flush(t.deps);
    expect(await t.deps.redis.hgetall(keys.seckill.counts(v))).toMatchObject({ ok: 2, SOLD_OUT: 2 });
  });

  test("with Redis not answering, the read falls back to this isolate's counts and says so", async () => {
    const { t, faults } = await isolate();
    const v = freshVoucher();
    t.deps.isolate.saleCounters.count(v, "ok");
    t.deps.isolate.saleCounters.count(v, "RATE_LIMITED");
    faults.on("redis.hgetall", "fail");
    const r = await saleOutcomes(t.deps, v);
    expect(r.acrossIsolates).toBe(false);
    expect(r.counts).toMatchObject({ ok: 1, RATE_LIMITED: 1, SOLD_OUT: 0 });
  });

  test("one flush sends at most MAX_FLUSH_VOUCHERS vouchers; the next sends the rest", async () => {
    const counters = new SaleCounters();
    const { t, faults } = await isolate();
    const v = Array.from({ length: MAX_FLUSH_VOUCHERS + 5 }, () => freshVoucher());
    for (const id of v) counters.count(id, "ok");
    await warm(t);
    const before = callsOf(faults);
    await counters.flush(t.deps);
    expect(counters.pending).toBe(5);
    await counters.flush(t.deps);
    expect(counters.pending).toBe(0);
    expect(callsOf(faults) - before).toBe(2);
    expect(Number(await t.deps.redis.hget(keys.seckill.counts(v.at(-1) ?? 0), "ok"))).toBe(1);
  });
});

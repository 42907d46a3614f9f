/**
 * Reconcile against live closes, writes and sales (issue 8: "Reconcile vs close", "The jobs'
 * registry"), on the real engines. Orders are written and closed by calling the services
 * directly (writeOrder / closeOrder), so each test decides what races with what; the QStash port
 * is muted so no background delivery adds a writer the test did not start.
 */
import { describe, expect, test } from "bun:test";
import type { Deps } from "../../src/deps.ts";
import { keys } from "../../src/redis/keys.ts";
import { luaSources } from "../../src/redis/scripts.ts";
import { loadSeckillConfig } from "../../src/services/seckill/config.ts";
import { seckillState } from "../../src/services/seckill/state.ts";
import { createSeckillVoucher } from "../../src/services/seckill/config.ts";
import { closeOrder, writeOrder } from "../../src/services/seckill/orders.ts";
import { type ReconcileReport, reconcile, type VoucherReport } from "../../src/services/seckill/reconcile.ts";
import { reserve } from "../../src/services/seckill/reserve.ts";
import type { Reservation } from "../../src/services/seckill/types.ts";
import { serviceDay, toSqlUtc } from "../../src/util/time.ts";
import { startFaultProxy } from "../../scripts/stack/fault-proxy.ts";
import { Faults } from "../support/faults.ts";
import { createShop, createShopType } from "../support/fixtures.ts";
import { afterQuery, withReplyLatency } from "../support/hooks.ts";
import { createSeckill, mysqlCounts, userIds } from "../support/seckill.ts";
import { getShardStack } from "../support/shards.ts";
import { createTestApp, eventually, type TestApp } from "../support/stack.ts";

const ENV = {
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: "0",
  SOLD_OUT_MEMO_MS: "0",
};

/** Deps whose queue calls are dropped (the test drives the writer and the closer itself). */
function muted(faults: Faults): (deps: Deps) => Deps {
  for (const m of ["publish", "publishJSON", "batchJSON"]) faults.on(`queue.${m}`, "drop");
  return (deps) => faults.wrap(deps);
}

async function app(faults = new Faults()): Promise<TestApp> {
  return await createTestApp(ENV, { wrap: muted(faults) });
}

/** Takes the voucher out of the jobs' registry (sale ended > 7 days ago), so later reconciles skip it. */
async function retire(t: TestApp, voucherId: number): Promise<void> {
  const now = Date.now();
  await t.deps.db.execute("UPDATE tb_seckill_voucher SET begin_time = ?, end_time = ? WHERE voucher_id = ?", [
    toSqlUtc(now - 9 * 86_400_000),
    toSqlUtc(now - 8 * 86_400_000),
    voucherId,
  ]);
}

async function outboxOf(t: TestApp, shopId: number, voucherId: number): Promise<Reservation[]> {
  const raw = (await t.deps.redis.hgetall<Record<string, unknown>>(keys.seckill.outbox(shopId))) ?? {};
  return Object.values(raw)
    .map((v) => (typeof v === "string" ? JSON.parse(v) : v) as Reservation)
    .filter((r) => r.voucherId === voucherId);
}

async function reservationOf(t: TestApp, shopId: number, orderId: string): Promise<Reservation> {
  const v = await t.deps.redis.hget<unknown>(keys.seckill.outbox(shopId), orderId);
  if (v === null || v === undefined) throw new Error(`reservation ${orderId} not in the outbox`);
  return (typeof v === "string" ? JSON.parse(v) : v) as Reservation;
}

async function buy(t: TestApp, voucherId: number, userId: number): Promise<string> {
  const r = await reserve(t.deps, { voucherId, userId, ip: "10.0.0.9" });
  if (!r.ok) throw new Error(`reserve for ${userId} failed: ${r.reason}`);
  return r.orderId;
}

async function redisState(
  t: TestApp,
  shopId: number,
  voucherId: number,
  buckets: number,
): Promise<{ stock: number; buyers: Set<string> }> {
  const tx = t.deps.redis.multi();
  for (let i = 0; i < buckets; i++) tx.get(keys.seckill.stock(shopId, voucherId, i));
  tx.smembers(keys.seckill.buyers(shopId, voucherId));
  const res = await tx.exec<unknown[]>();
  const stock = res.slice(0, buckets).reduce<number>((s, v) => s + Number(v ?? 0), 0);
  return { stock, buyers: new Set((res[buckets] as unknown[]).map(String)) };
}

async function activeUsers(t: TestApp, voucherId: number): Promise<Set<string>> {
  const rows = (
    await t.deps.db.execute("SELECT user_id FROM tb_voucher_order WHERE voucher_id = ? AND status IN (1, 2, 3)", [
      voucherId,
    ])
  ).rows as { user_id: string }[];
  return new Set(rows.map((r) => String(r.user_id)));
}

const mine = (report: ReconcileReport, voucherId: number): VoucherReport | undefined =>
  report.vouchers.find((v) => v.voucherId === voucherId);

/** Scheduling noise: resume now, after a few microtasks, or after a timer of 0–3 ms. Never a synchronisation. */
async function jitter(): Promise<void> {
  const pick = Math.floor(Math.random() * 3);
  if (pick === 0) return;
  if (pick === 1) {
    const n = 1 + Math.floor(Math.random() * 30);
    for (let i = 0; i < n; i++) await Promise.resolve();
    return;
  }
  await new Promise((r) => setTimeout(r, Math.random() * 3));
}

/**
 * Everything a trial must leave behind once every write is done: stock conserved on both sides,
 * both sides agreeing, and the buyers set being exactly the users holding a unit.
 */
async function expectConserved(
  t: TestApp,
  shopId: number,
  voucherId: number,
  initial: number,
  buckets: number,
  label: string,
): Promise<Set<string>> {
  const r = await redisState(t, shopId, voucherId, buckets);
  const m = await mysqlCounts(t, voucherId);
  const holders = await activeUsers(t, voucherId);
  expect(r.stock + r.buyers.size, `${label}: Redis stock + buyers`).toBe(initial);
  expect(m.stock + m.active, `${label}: MySQL stock + active`).toBe(initial);
  expect(r.stock, `${label}: Redis stock = MySQL stock`).toBe(m.stock);
  // Every buyer holds an active order (nothing is pending any more), and every holder is a buyer.
  expect([...r.buyers].sort(), `${label}: buyers = holders of active orders`).toEqual([...holders].sort());
  return r.buyers;
}

describe("reconcile vs close", () => {
  test("200 trials of reconcile racing closes, writes and a live sale keep stock conserved in Redis and MySQL and block no one", async () => {
    const t = await app();
    // Reconcile sees MySQL with 0–3 ms of reply latency, so closes and sales land between its
    // reads and its repairs as they would on a real network.
    const slow = withReplyLatency(t.deps, jitter);
    const shopId = await createShop(t, await createShopType(t));
    const started = performance.now();
    for (let trial = 0; trial < 200; trial++) {
      const label = `trial ${trial}`;
      const initial = 3;
      const buckets = 1 + (trial % 2);
      const { voucherId } = await createSeckill(t, { stock: initial, shopId, buckets });
      try {
        const [a, b, c, d, e] = userIds(5) as [number, number, number, number, number];
        // Before the race: a and b hold written (unpaid) orders, c a reservation still in the outbox.
        const oa = await buy(t, voucherId, a);
        const ob = await buy(t, voucherId, b);
        const oc = await buy(t, voucherId, c);
        await writeOrder(t.deps, await reservationOf(t, shopId, oa));
        await writeOrder(t.deps, await reservationOf(t, shopId, ob));
        const rc = await reservationOf(t, shopId, oc);

        /** A new buyer: reserve, then (as the writer would, a little later) write it. */
        const buyAndWrite = async (userId: number) => {
          await jitter();
          const r = await reserve(t.deps, { voucherId, userId, ip: "10.0.0.9" });
          if (!r.ok) return r.reason;
          await jitter();
          await writeOrder(t.deps, await reservationOf(t, shopId, r.orderId));
          return "ok";
        };
        let raced: ReconcileReport | undefined;
        await Promise.all([
          jitter().then(() => closeOrder(t.deps, oa)),
          trial % 2 === 0 ? jitter().then(() => closeOrder(t.deps, ob)) : Promise.resolve(),
          jitter().then(() => writeOrder(t.deps, rc)),
          buyAndWrite(d),
          buyAndWrite(e),
          // a re-buys while its close runs: DUPLICATE_ORDER until the release, a unit after it.
          buyAndWrite(a),
          jitter().then(async () => {
            raced = await reconcile(slow, Date.now());
          }),
        ]);

        // Anything the race left in the outbox (none expected: each reservation was written).
        for (const r of await outboxOf(t, shopId, voucherId)) await writeOrder(t.deps, r);
        const buyers = await expectConserved(t, shopId, voucherId, initial, buckets, label);
        // There was no drift to find: anything the racing reconcile reported was a false alarm.
        const seen = raced ? mine(raced, voucherId) : undefined;
        expect(seen?.drift ?? ["voucher not visited"], `${label}: reconcile during the race`).toEqual([]);
        expect(seen?.repaired, `${label}: reconcile during the race repaired`).toEqual([]);
        // The next reconcile finds nothing either.
        expect(
          mine(await reconcile(t.deps, Date.now()), voucherId)?.drift,
          `${label}: reconcile after the race`,
        ).toEqual([]);
        // No one without an order is blocked: every user not holding a unit may reserve again.
        for (const u of [a, b, c, d, e]) {
          if (buyers.has(String(u))) continue;
          const again = await reserve(t.deps, { voucherId, userId: u, ip: "10.0.0.9" });
          expect(
            again.ok || again.reason === "SOLD_OUT",
            `${label}: user ${u} may buy again (${again.ok ? "ok" : again.reason})`,
          ).toBe(true);
        }
        const after = await redisState(t, shopId, voucherId, buckets);
        expect(after.stock + after.buyers.size, `${label}: Redis stock + buyers after the re-buys`).toBe(initial);
      } finally {
        // Out of the registry, so later reconciles (and later tests) do not visit it.
        await retire(t, voucherId);
      }
    }
    console.log(`reconcile vs close: 200 trials in ${Math.round(performance.now() - started)} ms`);
  }, 240_000);

  /** The interleaving of the defect, forced: reconcile reads MySQL, a close releases, reconcile repairs. */
  async function exactRace(loseBuyerFirst: boolean) {
    const t = await app();
    const initial = 3;
    const { shopId, voucherId } = await createSeckill(t, { stock: initial });
    try {
      const [u, v] = userIds(2) as [number, number];
      const ou = await buy(t, voucherId, u);
      const ov = await buy(t, voucherId, v);
      await writeOrder(t.deps, await reservationOf(t, shopId, ou));
      await writeOrder(t.deps, await reservationOf(t, shopId, ov));
      // Variant: Redis had lost u from the buyers (the drift reconcile exists to repair) — and u's
      // close is what runs in the window, so re-adding u would now be wrong.
      if (loseBuyerFirst) await t.deps.redis.srem(keys.seckill.buyers(shopId, voucherId), String(u));

      // Reconcile's read of the orders (the first query that returns u's order row as a user
      // id), then u's close — commit and release — before reconcile takes its next step.
      const hook = afterQuery(
        t.deps,
        (sql, _args, result) =>
          /tb_voucher_order/.test(sql) &&
          (result.rows as { user_id?: unknown }[]).some((row) => String(row.user_id) === String(u)),
        () => closeOrder(t.deps, ou),
      );
      const report = await reconcile(hook.deps, Date.now());
      expect(await hook.fired).toBe("cancelled");

      const r = await redisState(t, shopId, voucherId, 1);
      expect(r.buyers.has(String(u))).toBe(false);
      expect([...r.buyers]).toEqual([String(v)]);
      expect(r.stock).toBe(initial - 1);
      const m = await mysqlCounts(t, voucherId);
      expect(m.stock + m.active).toBe(initial);
      expect(m.stock).toBe(r.stock);
      if (!loseBuyerFirst) expect(mine(report, voucherId)?.drift).toEqual([]);
      // u is not blocked: the released unit is u's to buy again.
      const again = await reserve(t.deps, { voucherId, userId: u, ip: "10.0.0.9" });
      expect(again.ok).toBe(true);
      const final = await redisState(t, shopId, voucherId, 1);
      expect(final.stock + final.buyers.size).toBe(initial);
    } finally {
      await retire(t, voucherId);
    }
  }

  test("a close that releases a buyer between reconcile's MySQL read and its repair: the buyer is not re-added and no unit is lost", async () => {
    await exactRace(false);
  });

  test("a buyer lost from Redis whose order is closed between reconcile's read and its repair is not re-added (the released set decides)", async () => {
    await exactRace(true);
  });
});

describe("MySQL stock repair", () => {
  test("drifted MySQL stock is repaired under the voucher row's lock while writers and closes commit: stock + active orders = initial afterwards", async () => {
    const t = await app();
    const initial = 6;
    const { shopId, voucherId } = await createSeckill(t, { stock: initial });
    try {
      const users = userIds(4);
      const ids: string[] = [];
      for (const u of users) ids.push(await buy(t, voucherId, u));
      const pending = await Promise.all(ids.map((id) => reservationOf(t, shopId, id)));
      await writeOrder(t.deps, pending[0] as Reservation);
      // Drift: someone edited the row by hand.
      await t.deps.db.execute("UPDATE tb_seckill_voucher SET stock = stock + 2 WHERE voucher_id = ?", [voucherId]);
      const [report] = await Promise.all([
        jitter().then(() => reconcile(withReplyLatency(t.deps, jitter), Date.now())),
        ...pending.slice(1).map((r) => jitter().then(() => writeOrder(t.deps, r))),
        jitter().then(() => closeOrder(t.deps, ids[0] as string)),
      ]);
      expect(mine(report, voucherId)?.drift.join(" ")).toContain("MySQL stock");
      expect(mine(report, voucherId)?.repaired.join(" ")).toContain("MySQL stock set to");
      const m = await mysqlCounts(t, voucherId);
      expect(m.active).toBe(3);
      expect(m.stock + m.active).toBe(initial);
      await expectConserved(t, shopId, voucherId, initial, 1, "after the MySQL repair");
      expect(mine(await reconcile(t.deps, Date.now()), voucherId)?.drift).toEqual([]);
    } finally {
      await retire(t, voucherId);
    }
  });
});

describe("the jobs' registry", () => {
  test("a voucher whose Redis keys were deleted is reloaded by the next reconcile from MySQL (active orders and pending reservations keep their units) and then sells correctly", async () => {
    const t = await app();
    const initial = 5;
    const { shopId, voucherId } = await createSeckill(t, { stock: initial, buckets: 2 });
    try {
      const [a, b, c, d, e, f] = userIds(6) as [number, number, number, number, number, number];
      const oa = await buy(t, voucherId, a);
      const ob = await buy(t, voucherId, b);
      await buy(t, voucherId, c);
      await writeOrder(t.deps, await reservationOf(t, shopId, oa));
      await writeOrder(t.deps, await reservationOf(t, shopId, ob));
      expect(await closeOrder(t.deps, ob)).toBe("cancelled");
      // State: a holds an unpaid order, b's order is cancelled and released, c's reservation is
      // pending in the (shop-wide) outbox. Now Redis loses every key of the voucher.
      await t.deps.redis.del(
        keys.seckill.meta(shopId, voucherId),
        keys.seckill.buyers(shopId, voucherId),
        keys.seckill.released(shopId, voucherId),
        keys.seckill.stock(shopId, voucherId, 0),
        keys.seckill.stock(shopId, voucherId, 1),
      );
      expect((await reserve(t.deps, { voucherId, userId: d, ip: "10.0.0.9" })).ok).toBe(false);

      const report = mine(await reconcile(t.deps, Date.now()), voucherId);
      expect(report?.drift).toContain("voucher missing in Redis");
      expect(report?.repaired.join(" ")).toContain("reloaded");
      const r = await redisState(t, shopId, voucherId, 2);
      expect([...r.buyers].sort()).toEqual([String(a), String(c)].sort());
      expect(r.stock).toBe(initial - 1 - 1); // initial − active − pending

      // A redelivered close of b's order must not give its unit back a second time.
      expect(await closeOrder(t.deps, ob)).toBe("already-cancelled");
      expect((await redisState(t, shopId, voucherId, 2)).stock).toBe(initial - 2);

      // It sells again, exactly what is left: b (released) and two new buyers; then sold out.
      const results = await Promise.all(
        [b, d, e, f, a, c].map((u) => reserve(t.deps, { voucherId, userId: u, ip: "10.0.0.9" })),
      );
      const reasons = results.map((x) => (x.ok ? "ok" : x.reason));
      expect(reasons.filter((x) => x === "ok").length).toBe(3);
      expect(reasons.slice(4)).toEqual(["DUPLICATE_ORDER", "DUPLICATE_ORDER"]);
      expect(reasons[0]).toBe("ok");
      for (const x of await outboxOf(t, shopId, voucherId)) await writeOrder(t.deps, x);
      await expectConserved(t, shopId, voucherId, initial, 2, "after the reload");
      expect((await mysqlCounts(t, voucherId)).stock).toBe(0);
      expect(mine(await reconcile(t.deps, Date.now()), voucherId)?.drift).toEqual([]);
    } finally {
      await retire(t, voucherId);
    }
  });

  test("a voucher whose Redis load failed at creation is found in MySQL and loaded by the next reconcile, then sells its stock exactly", async () => {
    const faults = new Faults();
    const t = await app(faults);
    const shopId = await createShop(t, await createShopType(t));
    const now = Date.now();
    // The creation's Redis step (one script call) fails after the MySQL transaction committed.
    faults.on("redis.evalsha", "fail", { times: 1 });
    await expect(
      createSeckillVoucher(t.deps, {
        shopId,
        title: "flash",
        subTitle: null,
        rules: null,
        payValue: 8000,
        actualValue: 10000,
        stock: 4,
        beginMs: now - 3_600_000,
        endMs: now + 3_600_000,
        buckets: 1,
        dailyLimit: 0,
      }),
    ).rejects.toThrow("injected fault");
    const row = (await t.deps.db.execute("SELECT voucher_id FROM tb_seckill_config WHERE shop_id = ?", [shopId]))
      .rows[0] as { voucher_id: string } | undefined;
    const voucherId = Number(row?.voucher_id);
    expect(voucherId).toBeGreaterThan(0);
    try {
      expect(await t.deps.redis.exists(keys.seckill.meta(shopId, voucherId))).toBe(0);
      const buyers = userIds(6);
      expect((await reserve(t.deps, { voucherId, userId: buyers[0] as number, ip: "10.0.0.9" })).ok).toBe(false);

      const report = mine(await reconcile(t.deps, Date.now()), voucherId);
      expect(report?.drift).toContain("voucher missing in Redis");
      expect(report?.redisStock).toBe(4);

      const results = await Promise.all(buyers.map((u) => reserve(t.deps, { voucherId, userId: u, ip: "10.0.0.9" })));
      expect(results.filter((x) => x.ok).length).toBe(4);
      expect(results.filter((x) => !x.ok && x.reason === "SOLD_OUT").length).toBe(2);
      for (const x of await outboxOf(t, shopId, voucherId)) await writeOrder(t.deps, x);
      await expectConserved(t, shopId, voucherId, 4, 1, "after the creation-time reload");
      expect(mine(await reconcile(t.deps, Date.now()), voucherId)?.drift).toEqual([]);
    } finally {
      await retire(t, voucherId);
    }
  });
});

describe("reload with daily sets in both forms", () => {
  test("a reload whose settled orders' daily keys are still legacy integer counters does not abort: the voucher is reloaded, the report stored, the set form cleaned", async () => {
    const t = await app();
    const { shopId, voucherId } = await createSeckill(t, { stock: 4, shopDailyLimit: 3 });
    try {
      const [a, b] = userIds(2) as [number, number];
      const oa = await buy(t, voucherId, a);
      const ob = await buy(t, voucherId, b);
      for (const o of [oa, ob]) await writeOrder(t.deps, await reservationOf(t, shopId, o));
      expect(await closeOrder(t.deps, oa)).toBe("cancelled");
      expect(await closeOrder(t.deps, ob)).toBe("cancelled");
      const day = serviceDay(Date.now(), t.deps.config.SERVICE_TIME_ZONE);
      const legacy = keys.seckill.daily(shopId, a, day);
      const set = keys.seckill.daily(shopId, b, day);
      // a's daily key in the form written before the set (an integer counter); b's a set still
      // holding its cancelled order (as a release lost before it took it out leaves it).
      await t.deps.redis.set(legacy, "2", { ex: 3_600 });
      await t.deps.redis.sadd(set, ob);
      await t.deps.redis.del(
        keys.seckill.meta(shopId, voucherId),
        keys.seckill.buyers(shopId, voucherId),
        keys.seckill.released(shopId, voucherId),
        keys.seckill.stock(shopId, voucherId, 0),
      );
      await t.deps.redis.del(keys.seckill.reconcileReport());

      const report = mine(await reconcile(t.deps, Date.now()), voucherId);
      expect(report?.drift).toContain("voucher missing in Redis");
      expect(report?.repaired.join(" ")).toContain("reloaded");
      expect(report?.redisStock).toBe(4);
      expect(await t.deps.redis.exists(keys.seckill.reconcileReport())).toBe(1);
      expect(await t.deps.redis.sismember(set, ob)).toBe(0);
      // The counter cannot tell whether this order's release already counted it out: left alone
      // (strict side), it expires within the day.
      expect(Number(await t.deps.redis.get(legacy))).toBe(2);
      // And the next pass is clean.
      expect(mine(await reconcile(t.deps, Date.now()), voucherId)?.ok).toBe(true);
    } finally {
      await retire(t, voucherId);
    }
  });
});

describe("sharded vouchers", () => {
  const N = 4;

  /** An app whose shard `down` is reached through a fault proxy (the test sets what it does). */
  async function shardedApp(down: number, clock?: Deps["clock"]) {
    const shards = await getShardStack(N);
    const urls = shards.env.SECKILL_SHARD_URLS.split(",");
    const proxy = startFaultProxy(urls[down] as string);
    urls[down] = proxy.url;
    const env = { ...ENV, ...shards.env, SECKILL_SHARD_URLS: urls.join(",") };
    const t = await createTestApp(env, { wrap: muted(new Faults()), ...(clock ? { clock } : {}) });
    return { t, proxy, shards };
  }

  test("one shard database failing: the other shards and the later vouchers are reconciled, the failing one reported, the report stored", async () => {
    const { t, proxy } = await shardedApp(2);
    const plain = await app();
    const sharded = await createSeckill(t, { stock: 8 });
    const later = await createSeckill(plain, { stock: 5 });
    try {
      // Drift in a reachable shard and in the later (unsharded) voucher: both must be repaired.
      const shard1 = t.deps.seckillShards[1] as Deps["redis"];
      await shard1.incrby(keys.seckill.stock(sharded.shopId, sharded.voucherId, 0), 3);
      await plain.deps.redis.incrby(keys.seckill.stock(later.shopId, later.voucherId, 0), 2);
      await t.deps.redis.del(keys.seckill.reconcileReport());
      proxy.set({ kind: "fail" });

      const report = await reconcile(t.deps, Date.now());
      const v = mine(report, sharded.voucherId);
      expect(v?.ok).toBe(false);
      expect(v?.drift.some((d) => d.startsWith("shard 2: not reconciled"))).toBe(true);
      expect(v?.shards?.find((s) => s.shard === 1)?.repaired).toContain("Redis stock set to 2");
      expect(v?.shards?.filter((s) => s.ok).map((s) => s.shard)).toEqual([0, 3]);
      expect(mine(report, later.voucherId)?.repaired).toContain("Redis stock set to 5");
      expect(await t.deps.redis.exists(keys.seckill.reconcileReport())).toBe(1);

      // Healed: once the shard's breaker lets calls through again, a pass finds the voucher whole.
      proxy.set({ kind: "pass" });
      let healed = mine(await reconcile(t.deps, Date.now()), sharded.voucherId);
      await eventually(
        "a pass after the shard healed to find the voucher whole",
        async () => {
          healed = mine(await reconcile(t.deps, Date.now()), sharded.voucherId);
          return healed?.drift.length === 0;
        },
        15_000,
        250,
      );
      expect(healed?.drift).toEqual([]);
      expect(healed?.shards?.length).toBe(N);
    } finally {
      await retire(t, sharded.voucherId);
      await retire(plain, later.voucherId);
      await proxy.stop();
    }
  }, 60_000);

  test("two overlapping runs both seeing shard shares short of MySQL's stock credit the deficit to shard 0 once", async () => {
    // Run A reaches shard 0 through a proxy that holds its credit; run B (another isolate, a
    // direct connection) runs whole meanwhile: both computed the same deficit from their reads.
    const { t: a, proxy, shards } = await shardedApp(0);
    const bShards = await createTestApp({ ...ENV, ...shards.env }, { wrap: muted(new Faults()) });
    const { shopId, voucherId } = await createSeckill(bShards, { stock: 8 });
    try {
      const cfg = await loadSeckillConfig(bShards.deps, voucherId);
      if (!cfg) throw new Error("no voucher");
      // Two units lost for good in shard 1: its share and stock lowered together (a move-out whose
      // log entry was lost), so the shard is consistent in itself and only the sum is short.
      const shard1 = bShards.deps.seckillShards[1] as Deps["redis"];
      await shard1.hincrby(keys.seckill.meta(shopId, voucherId), "initial", -2);
      await shard1.decrby(keys.seckill.stock(shopId, voucherId, 0), 2);
      const shard0 = bShards.deps.seckillShards[0] as Deps["redis"];
      await shard0.scriptLoad(luaSources.seckillMoveIn); // so the credit is one EVALSHA the proxy can match
      expect((await seckillState(bShards.deps, cfg)).stock).toBe(6);

      const sha = new Bun.CryptoHasher("sha1").update(luaSources.seckillMoveIn).digest("hex");
      proxy.set({ kind: "delay", ms: 6_000, match: sha });
      const runA = reconcile(a.deps, Date.now());
      await eventually("run A's credit is on its way to shard 0", async () => proxy.delayed >= 1, 30_000, 10);
      const byB = mine(await reconcile(bShards.deps, Date.now()), voucherId);
      expect(byB?.repaired).toContain("gave 2 lost unit(s) back to shard 0");
      const byA = mine(await runA, voucherId);
      expect(byA?.drift.join(" ")).toContain("add up to 6");
      expect(byA?.drift).toContain("deficit not credited: another pass changed the shares meanwhile");

      const state = await seckillState(bShards.deps, cfg);
      expect(state.stock).toBe(8);
      expect(state.shards.reduce((x, s) => x + (s.share ?? 0), 0)).toBe(8);
      expect(mine(await reconcile(bShards.deps, Date.now()), voucherId)?.drift).toEqual([]);
    } finally {
      await retire(bShards, voucherId);
      await proxy.stop();
    }
  }, 60_000);
});

/**
 * The batched order pipeline (architecture.md §5): what each stage costs in Redis commands,
 * PlanetScale round trips and QStash messages, and that groups stay exactly-once when they are
 * redelivered, overlap, race each other or meet lock conflicts.
 */
import { describe, expect, test } from "bun:test";
import { sweepOutbox } from "../../src/services/seckill/pipeline.ts";
import { drainMessage, ORDER_CLOSE_PATH, ORDER_DRAIN_PATH } from "../../src/queue/messages.ts";
import { keys } from "../../src/redis/keys.ts";
import { createLogger, type Logger } from "../../src/log.ts";
import { loadSeckillConfig, loadSeckillIntoRedis } from "../../src/services/seckill/config.ts";
import { claimGroup } from "../../src/services/seckill/outbox.ts";
import { reserve } from "../../src/services/seckill/reserve.ts";
import type { Reservation } from "../../src/services/seckill/types.ts";
import { DRAIN_LANES, drainShop, writeGroup } from "../../src/services/seckill/writer.ts";
import type { Deps } from "../../src/deps.ts";
import { call, loginAs } from "../support/http.ts";
import { Faults } from "../support/faults.ts";
import { qstashSignature } from "../support/qstash-sign.ts";
import { createSeckill, mysqlCounts, userIds } from "../support/seckill.ts";
import { createTestApp, eventually, serveTestApp, type TestApp } from "../support/stack.ts";

const ENV = {
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: "0",
  SOLD_OUT_MEMO_MS: "0",
};

type Message = { url: string; body: unknown; deduplicationId?: string; notBefore?: number; delay?: number };

/** An app whose QStash publishes are recorded and dropped: the test delivers what it wants. */
async function tappedApp(env: Record<string, string> = {}, extra: { log?: Logger } = {}) {
  const faults = new Faults().on("queue.batchJSON", "tap");
  const t = await createTestApp({ ...ENV, ...env }, { wrap: (deps) => faults.wrap(deps), ...extra });
  const messages = () => (faults.tapped.get("queue.batchJSON") ?? []).flatMap((args) => args[0] as Message[]);
  return { t, faults, messages };
}

async function reserveMany(t: TestApp, voucherId: number, n: number): Promise<string[]> {
  const res = await Promise.all(userIds(n).map((userId) => reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })));
  const ids = res.map((r) => (r.ok ? r.orderId : ""));
  expect(ids.every((id) => id !== "")).toBe(true);
  await t.settle();
  return ids;
}

async function outbox(t: TestApp, shopId: number): Promise<Reservation[]> {
  const raw = (await t.deps.redis.hgetall<Record<string, Reservation>>(keys.seckill.outbox(shopId))) ?? {};
  return Object.values(raw);
}

function counters(t: TestApp) {
  const rest = t.stack.rest.stats();
  return {
    redisRequests: rest.requests,
    redisCommands: rest.commands,
    dbRequests: t.stack.planetscale.stats().requests,
  };
}

describe("batched order pipeline", () => {
  test("a burst of reservations costs one drain announcement per shop and window, and one batched index write", async () => {
    const { t, messages } = await tappedApp();
    const { shopId, voucherId } = await createSeckill(t, { stock: 200 });
    const before = t.deps.isolate.orderGroups.stats.redisCommands;
    await reserveMany(t, voucherId, 200);
    const drains = messages().filter((m) => m.url.endsWith(ORDER_DRAIN_PATH));
    // 200 concurrent reservations land in one or two one-second windows.
    expect(drains.length).toBeGreaterThanOrEqual(1);
    expect(drains.length).toBeLessThanOrEqual(2);
    for (const d of drains) {
      expect(d.body).toEqual({ shopId });
      expect(d.deduplicationId).toMatch(new RegExp(`^drain-s${shopId}-w\\d+$`));
      // Delivered after the window it announces, so every reservation of it is in the outbox.
      const window = Number(d.deduplicationId?.split("-w")[1]);
      expect((d.notBefore as number) * 1000).toBeGreaterThanOrEqual((window + 1) * 1000);
    }
    // The index writes are batched: far fewer commands than reservations.
    expect(t.deps.isolate.orderGroups.stats.redisCommands - before).toBeLessThanOrEqual(10);
    expect((await outbox(t, shopId)).length).toBe(200);
  });

  test("a drain writes a group with one claim, one INSERT and one stock update, one ack and one close message, whatever its size", async () => {
    const costs: { redis: number; db: number; closes: number }[] = [];
    for (const n of [10, 120]) {
      const { t, messages, faults } = await tappedApp();
      const { shopId, voucherId } = await createSeckill(t, { stock: n });
      await reserveMany(t, voucherId, n);
      const closesBefore = messages().filter((m) => m.url.endsWith(ORDER_CLOSE_PATH)).length;
      // Counted at the app's own clients (the fault wrapper counts every call through the ports).
      // One EVALSHA per script call (a first call after a script flush adds an EVAL: not counted).
      const redisCalls = () =>
        [...faults.calls].filter(([k]) => k.startsWith("redis.") && k !== "redis.eval").reduce((n, [, v]) => n + v, 0);
      const r0 = redisCalls();
      const c0 = counters(t);
      const res = await drainShop(t.deps, shopId);
      const c1 = counters(t);
      const r1 = redisCalls();
      expect(res).toMatchObject({ groups: 1, created: n, existed: 0, refused: 0 });
      const closes = messages()
        .filter((m) => m.url.endsWith(ORDER_CLOSE_PATH))
        .slice(closesBefore);
      expect(closes.length).toBe(1);
      expect(((closes[0]?.body ?? { orderIds: [] }) as { orderIds: string[] }).orderIds.length).toBe(n);
      expect(closes[0]?.delay).toBe(86400);
      costs.push({ redis: r1 - r0, db: c1.dbRequests - c0.dbRequests, closes: closes.length });
      expect(await mysqlCounts(t, voucherId)).toEqual({ orders: n, active: n, stock: 0 });
      expect((await outbox(t, shopId)).length).toBe(0);
    }
    // Same cost for 10 and for 120 orders: one claim per lane (the second lane finds the outbox
    // empty) and one ack; the transaction is BEGIN / INSERT / UPDATE / COMMIT.
    expect(costs[0]).toEqual(costs[1] as (typeof costs)[0]);
    expect(costs[0]?.redis).toBe(DRAIN_LANES + 1);
    expect(costs[0]?.db).toBeLessThanOrEqual(4);
  });

  test("redelivered, overlapping and concurrent groups stay exactly-once in effect", async () => {
    const { t } = await tappedApp();
    const stock = 150;
    const { shopId, voucherId } = await createSeckill(t, { stock });
    await reserveMany(t, voucherId, stock);
    const all = await outbox(t, shopId);
    // Six writers, each with a random ~half of the reservations, all at once, plus two drains.
    const subsets = Array.from({ length: 6 }, () => all.filter(() => Math.random() < 0.5));
    const results = await Promise.all([
      ...subsets.map((s) => writeGroup(t.deps, s)),
      drainShop(t.deps, shopId),
      drainShop(t.deps, shopId),
    ]);
    const created = results.reduce((n, r) => n + ("created" in r ? r.created : 0), 0);
    expect(created).toBe(stock);
    const rows = (
      await t.deps.db.execute(
        "SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS d FROM tb_voucher_order WHERE voucher_id = ?",
        [voucherId],
      )
    ).rows[0] as { n: string; d: string };
    expect(Number(rows.n)).toBe(stock);
    expect(Number(rows.d)).toBe(stock);
    expect(await mysqlCounts(t, voucherId)).toEqual({ orders: stock, active: stock, stock: 0 });
    // Lock conflicts may have happened; none outlasted the retries.
    expect(t.deps.isolate.orderGroups.lockConflicts.exhausted).toBe(0);
    // A replay of the whole outbox content as one more group writes nothing.
    expect(await writeGroup(t.deps, all)).toMatchObject({ created: 0, existed: stock });
  });

  test("an order id whose row belongs to another reservation is not acknowledged as this one (a collision never drops an order silently)", async () => {
    const { t } = await tappedApp();
    const { shopId, voucherId } = await createSeckill(t, { stock: 5 });
    await reserveMany(t, voucherId, 2);
    const [mine, other] = (await outbox(t, shopId)) as [Reservation, Reservation];
    // Someone else's order already holds `mine`'s id (a collision the id scheme rules out, stated as a test).
    await t.deps.db.execute(
      "INSERT INTO tb_voucher_order (id, user_id, voucher_id, status, create_time) VALUES (?, ?, ?, 1, NOW())",
      [BigInt(mine.orderId), mine.userId + 1, voucherId],
    );
    const res = await writeGroup(t.deps, [mine, other]);
    expect(res.refused).toEqual([mine.orderId]);
    expect(res.written).toEqual([other.orderId]);
    // Its replay of the same reservation (same user and voucher) is still exactly-once and acknowledged.
    expect(await writeGroup(t.deps, [other])).toMatchObject({
      created: 0,
      existed: 1,
      written: [other.orderId],
      refused: [],
    });
  });

  test("a claimed group is not handed to a second writer until its lease runs out, and a failed write hands it back at once", async () => {
    const { t } = await tappedApp();
    const { shopId, voucherId } = await createSeckill(t, { stock: 20 });
    await reserveMany(t, voucherId, 20);
    const now = Date.now();
    const first = await claimGroup(t.deps, shopId, now, 500, 30_000);
    expect(first.length).toBe(20);
    expect((await claimGroup(t.deps, shopId, now + 1000, 500, 30_000)).length).toBe(0);
    expect((await claimGroup(t.deps, shopId, now + 31_000, 500, 30_000)).length).toBe(20);

    // A write that fails inside the handler gives the group back: the next drain takes it now.
    const { t: t2, faults } = await (async () => {
      const f = new Faults().on("queue.batchJSON", "tap");
      return { t: await createTestApp(ENV, { wrap: (deps) => f.wrap(deps) }), faults: f };
    })();
    const s2 = await createSeckill(t2, { stock: 5 });
    await reserveMany(t2, s2.voucherId, 5);
    faults.on("db.transaction", "fail", { times: 1 });
    await expect(drainShop(t2.deps, s2.shopId)).rejects.toThrow("injected fault");
    expect(await drainShop(t2.deps, s2.shopId)).toMatchObject({ created: 5 });
  });

  test("MySQL lock conflicts are retried inside the handler, counted, and never logged as unhandled errors", async () => {
    const lines: string[] = [];
    const base = createLogger("warn");
    const capture: Logger = {
      ...base,
      warn: (msg, f) => lines.push(`warn ${msg} ${JSON.stringify(f ?? {})}`),
      error: (msg, f) => lines.push(`error ${msg} ${JSON.stringify(f ?? {})}`),
      child: () => capture,
    };
    let conflicts = 0;
    const wrap = (deps: Deps): Deps => ({
      ...deps,
      db: {
        execute: deps.db.execute.bind(deps.db),
        transaction: (async (fn: Parameters<Deps["db"]["transaction"]>[0]) => {
          if (conflicts-- > 0)
            throw new Error(
              "target: cityhub.-.primary: vttablet: Deadlock found when trying to get lock; try restarting transaction (errno 1213) (sqlstate 40001)",
            );
          return await deps.db.transaction(fn);
        }) as Deps["db"]["transaction"],
      },
    });
    const t = await serveTestApp({ ...ENV, LOG_LEVEL: "warn" }, { log: capture, wrap });
    try {
      const { shopId, voucherId } = await createSeckill(t, { stock: 4 });
      conflicts = 3;
      // Reserve without the real QStash delivering anything yet: deliver the drain ourselves.
      for (const userId of userIds(4))
        expect((await reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })).ok).toBe(true);
      const body = JSON.stringify({ shopId });
      const signature = await qstashSignature({
        key: t.deps.config.QSTASH_CURRENT_SIGNING_KEY,
        url: `${t.url}${ORDER_DRAIN_PATH}`,
        body,
      });
      const res = await call(t.app, "POST", ORDER_DRAIN_PATH, {
        body,
        headers: { "content-type": "application/json", "upstash-signature": signature },
      });
      expect(res.status).toBe(200);
      await eventually("orders written", async () => (await mysqlCounts(t, voucherId)).orders === 4);
      expect(t.deps.isolate.orderGroups.lockConflicts.retried).toBe(3);
      expect(t.deps.isolate.orderGroups.lockConflicts.exhausted).toBe(0);
      expect(lines.filter((l) => l.includes("unhandled error"))).toEqual([]);
    } finally {
      await t.settle();
      await t.stop();
    }
  });
});

describe("voucher load", () => {
  test("a late creation-time load never resets stock that buyers already took", async () => {
    const { t } = await tappedApp();
    const { voucherId } = await createSeckill(t, { stock: 5 });
    await reserveMany(t, voucherId, 2);
    const cfg = await loadSeckillConfig(t.deps, voucherId);
    if (!cfg) throw new Error("no config");
    // The creation's load, arriving late (after the reconcile job loaded the voucher, say).
    expect(await loadSeckillIntoRedis(t.deps, cfg)).toBe(false);
    expect(Number(await t.deps.redis.get(keys.seckill.stock(cfg.shopId, voucherId, 0)))).toBe(3);
  });
});

describe("operators", () => {
  test("GET /admin/orders/pipeline shows each shop's backlog and lag and this isolate's counters; operators only", async () => {
    const { t } = await tappedApp();
    const { shopId, voucherId } = await createSeckill(t, { stock: 30 });
    await reserveMany(t, voucherId, 30);
    const op = `Bearer ${t.deps.config.ADMIN_TOKEN}`;
    type View = {
      shops: { shopId: number; pending: number; lagMs: number }[];
      isolate: { reservations: number; lockConflicts: { retried: number } };
    };
    const before = await call<View>(t.app, "GET", "/admin/orders/pipeline", { token: op });
    expect(before.body.data?.shops.find((s) => s.shopId === shopId)).toMatchObject({ pending: 30 });
    expect(before.body.data?.isolate.reservations).toBe(30);
    await drainShop(t.deps, shopId);
    const after = await call<View>(t.app, "GET", "/admin/orders/pipeline", { token: op });
    expect(after.body.data?.shops.find((s) => s.shopId === shopId)).toBeUndefined();
    expect((await call(t.app, "GET", "/admin/orders/pipeline")).status).toBe(401);
  });
});

describe("bounded lookups", () => {
  test("GET and pay of an id not in MySQL cost the same few Redis commands however many shops have sales", async () => {
    const { t } = await tappedApp();
    const owner = await loginAs(t.app, t.deps);
    const unknown = "123456789012345678";
    // Warm the caller's session in the isolate path, then measure.
    await call(t.app, "GET", `/api/voucher-order/${unknown}`, { token: owner.token });
    const once = async () => {
      const before = t.stack.rest.stats().commands;
      const get = await call(t.app, "GET", `/api/voucher-order/${unknown}`, { token: owner.token });
      expect(get.body).toMatchObject({ success: false, code: "NOT_FOUND" });
      const pay = await call(t.app, "POST", `/api/voucher-order/${unknown}/pay`, { token: owner.token });
      expect(pay.body).toMatchObject({ success: false, code: "NOT_FOUND" });
      return t.stack.rest.stats().commands - before;
    };
    // The least of three runs: a background flush (cache counters) may land in any one of them.
    const cost = async () => Math.min(await once(), await once(), await once());
    const few = await cost();
    for (let i = 0; i < 25; i++) await createSeckill(t, { stock: 1 });
    const many = await cost();
    expect(many).toBe(few);
    // Per request: the session (≤ 2) and one index lookup.
    expect(few).toBeLessThanOrEqual(2 * 3);
  });

  test("another isolate finds a queued order through the order index, and only its owner sees it", async () => {
    const { t } = await tappedApp();
    const { voucherId } = await createSeckill(t, { stock: 3 });
    const owner = await loginAs(t.app, t.deps);
    const other = await loginAs(t.app, t.deps);
    const res = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: owner.token });
    const id = res.body.data as string;
    await t.settle();
    const second = await createTestApp(ENV);
    const seen = await call<{ status: string; id: string }>(second.app, "GET", `/api/voucher-order/${id}`, {
      token: owner.token,
    });
    expect(seen.body).toMatchObject({ success: true, data: { id, status: "queued" } });
    expect((await call(second.app, "GET", `/api/voucher-order/${id}`, { token: other.token })).body).toMatchObject({
      success: false,
      code: "NOT_FOUND",
    });
  });
});

describe("drain windows", () => {
  /** A clock that stands still at `frozen` while set, and is real time otherwise. */
  function stoppableClock() {
    const clock = { frozen: undefined as number | undefined, now: () => clock.frozen ?? Date.now() };
    return clock;
  }

  test("the drain window is the one the outbox entry landed in, not the clock read before the reservation's awaits", async () => {
    const faults = new Faults().on("queue.batchJSON", "tap");
    const clock = stoppableClock();
    const t = await createTestApp(
      { ...ENV, ORDER_WINDOW_GRACE_MS: "100" },
      { clock, wrap: (deps) => faults.wrap(deps) },
    );
    const { shopId, voucherId } = await createSeckill(t, { stock: 10 });
    const w = Math.floor(Date.now() / 1000) + 1;
    // The reservation starts 500 ms into window w; its awaits (config, admission, id, the script)
    // take it 900 ms further, into w + 1, before the entry lands.
    clock.frozen = w * 1000 + 500;
    // The reservation script's round trip is where the time passes (the clock moves when it returns).
    const batch = t.deps.isolate.reserveBatch;
    const slowScript = (deps: Deps): Deps => ({
      ...deps,
      isolate: {
        ...deps.isolate,
        reserveBatch: Object.assign(Object.create(batch) as typeof batch, {
          exec: async (...args: Parameters<typeof batch.exec>) => {
            const out = await batch.exec(...args);
            clock.frozen = (clock.frozen as number) + 900;
            return out;
          },
        }),
      },
    });
    const res = await reserve(slowScript(t.deps), { voucherId, userId: 7, ip: "10.0.0.1" });
    expect(res.ok).toBe(true);
    await t.settle();
    const ids = (faults.tapped.get("queue.batchJSON") ?? [])
      .flatMap((args) => args[0] as Message[])
      .map((m) => m.deduplicationId);
    // Window w was (or will be) drained before this entry existed: w + 1 is the one announced.
    expect(ids).toContain(`drain-s${shopId}-w${w + 1}`);
    expect(ids).not.toContain(`drain-s${shopId}-w${w}`);
  });

  test("a reservation in the last ORDER_WINDOW_GRACE_MS of its window also announces the next window; one earlier in the window does not", async () => {
    const faults = new Faults().on("queue.batchJSON", "tap");
    const clock = stoppableClock();
    const t = await createTestApp(
      { ...ENV, ORDER_WINDOW_GRACE_MS: "100" },
      { clock, wrap: (deps) => faults.wrap(deps) },
    );
    const { shopId, voucherId } = await createSeckill(t, { stock: 10 });
    const drainIds = () =>
      (faults.tapped.get("queue.batchJSON") ?? [])
        .flatMap((args) => args[0] as Message[])
        .filter((m) => m.url.endsWith(ORDER_DRAIN_PATH))
        .map((m) => m.deduplicationId);
    // Early in a window (200 ms in): that window only.
    const w = Math.floor(Date.now() / 1000) + 1;
    clock.frozen = w * 1000 + 200;
    expect((await reserve(t.deps, { voucherId, userId: 1, ip: "10.0.0.1" })).ok).toBe(true);
    await t.settle();
    expect(drainIds()).toEqual([`drain-s${shopId}-w${w}`]);
    // 30 ms before the next window ends: that window and the one after it.
    clock.frozen = (w + 2) * 1000 - 30;
    expect((await reserve(t.deps, { voucherId, userId: 2, ip: "10.0.0.1" })).ok).toBe(true);
    await t.settle();
    expect(drainIds()).toEqual([`drain-s${shopId}-w${w}`, `drain-s${shopId}-w${w + 1}`, `drain-s${shopId}-w${w + 2}`]);
    // The next window was announced already: a reservation in it costs no message.
    clock.frozen = (w + 2) * 1000 + 300;
    expect((await reserve(t.deps, { voucherId, userId: 3, ip: "10.0.0.1" })).ok).toBe(true);
    await t.settle();
    expect(drainIds()).toHaveLength(3);
  });

  test("an entry that lands after its window's drain was delivered (an isolate clock a little behind) reaches MySQL without the sweep", async () => {
    const clock = stoppableClock();
    const t = await serveTestApp({ ...ENV, ORDER_WINDOW_GRACE_MS: "100" }, { clock });
    try {
      const { shopId, voucherId } = await createSeckill(t, { stock: 10 });
      // The window that just ended has had its drain delivered (another isolate's announcement,
      // or the writer's follow-up), while its outbox was still empty.
      const w = Math.floor(Date.now() / 1000) - 1;
      const delivered = t.stack.qstash.stats().delivered;
      await t.deps.queue.batchJSON([drainMessage(t.deps, shopId, w)]);
      await eventually("the window's drain delivered", async () => t.stack.qstash.stats().delivered > delivered);
      // This isolate's clock is 20+ ms behind: it files the reservation under that spent window.
      clock.frozen = (w + 1) * 1000 - 20;
      const r = await reserve(t.deps, { voucherId, userId: 7, ip: "10.0.0.1" });
      clock.frozen = undefined;
      expect(r.ok).toBe(true);
      // No cron runs here (RUN_CRON=false): only a drain announced for a later window can write it.
      // Written and acknowledged (the writer acks after its commit).
      await eventually(
        "the straggler's order in MySQL and out of the outbox",
        async () =>
          (await mysqlCounts(t, voucherId)).orders === 1 &&
          (await t.deps.redis.hlen(keys.seckill.outbox(shopId))) === 0,
        8_000,
      );
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 20_000);
});

describe("outbox sweep", () => {
  test("overdue entries cost one drain message per shop per pass, never one per entry, and re-sends share one id per minute", async () => {
    const { t, messages } = await tappedApp({ OUTBOX_REPUBLISH_AFTER_SECONDS: "1" });
    const a = await createSeckill(t, { stock: 150 });
    const b = await createSeckill(t, { stock: 150 });
    await reserveMany(t, a.voucherId, 150);
    await reserveMany(t, b.voucherId, 150);
    const mine = (from: number) =>
      messages()
        .slice(from)
        .filter(
          (m) =>
            [a.shopId, b.shopId].includes((m.body as { shopId: number }).shopId) && m.url.endsWith(ORDER_DRAIN_PATH),
        );
    // QStash is "slow": nothing it was given is delivered. Wait until the backlog is overdue.
    const shopDue = async () =>
      (await t.deps.redis.zcount(keys.seckill.outboxDue(a.shopId), "-inf", Date.now() - 1000)) +
      (await t.deps.redis.zcount(keys.seckill.outboxDue(b.shopId), "-inf", Date.now() - 1000));
    await eventually("entries overdue", async () => (await shopDue()) === 300, 10_000, 100);
    const start = messages().length;
    for (let pass = 1; pass <= 3; pass++) {
      const r = await sweepOutbox(t.deps, Date.now());
      expect(r.overdue).toBeGreaterThanOrEqual(300);
      // One drain per shop per pass (other test files' shops may add their own).
      expect(mine(start).length).toBe(2 * pass);
    }
    const sent = mine(start);
    expect(new Set(sent.map((m) => JSON.stringify(m.body)))).toEqual(
      new Set([JSON.stringify({ shopId: a.shopId }), JSON.stringify({ shopId: b.shopId })]),
    );
    // Re-sends within a minute carry the same deduplication id (QStash keeps one): at most two
    // distinct ids per shop even if the passes straddle a minute boundary.
    for (const shopId of [a.shopId, b.shopId]) {
      const ids = new Set(
        sent.filter((m) => (m.body as { shopId: number }).shopId === shopId).map((m) => m.deduplicationId),
      );
      expect(ids.size).toBeLessThanOrEqual(2);
    }
    // The backlog itself is untouched: still 150 entries per shop, nothing multiplied.
    expect((await outbox(t, a.shopId)).length).toBe(150);
    expect((await outbox(t, b.shopId)).length).toBe(150);
  }, 30_000);
});

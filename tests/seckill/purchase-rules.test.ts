/**
 * Purchase-limit rules (issue 11 point 5): "at most K per user across this shop / this campaign
 * over N days", validated at creation, checked atomically in reserve-stock.lua, given back once by
 * a release, restored by a reload.
 */
import { describe, expect, test } from "bun:test";
import { closeExpired } from "../../src/services/seckill/close.ts";
import { keys } from "../../src/redis/keys.ts";
import { scriptsFor } from "../../src/redis/scripts.ts";
import { loadSeckillConfig, type SeckillConfig } from "../../src/services/seckill/config.ts";
import { closeOrder, findReservation, writeOrder } from "../../src/services/seckill/orders.ts";
import { parseReservation } from "../../src/services/seckill/outbox.ts";
import { reconcile } from "../../src/services/seckill/reconcile.ts";
import { reserve, reserveArgs, reserveKeys } from "../../src/services/seckill/reserve.ts";
import { serviceDay } from "../../src/util/time.ts";
import { DAY_MS } from "../../src/services/seckill/rules.ts";
import type { Reservation } from "../../src/services/seckill/types.ts";
import { createShop, createShopType, operator } from "../support/fixtures.ts";
import { call } from "../support/http.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { createTestApp, eventually, serveTestApp, type TestApp } from "../support/stack.ts";

const ENV = {
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: "0",
  SOLD_OUT_MEMO_MS: "0",
};
const shopRule = (limit: number, days: number) => ({ scope: "shop" as const, limit, days });
const campaignRule = (limit: number, days: number) => ({ scope: "campaign" as const, limit, days });

async function cfgOf(t: TestApp, voucherId: number): Promise<SeckillConfig> {
  const cfg = await loadSeckillConfig(t.deps, voucherId);
  if (!cfg) throw new Error(`no config for ${voucherId}`);
  return cfg;
}

/** One reserve-stock.lua call at an exact `now` (the script's clock is its ARGV). */
async function reserveAt(
  t: TestApp,
  cfg: SeckillConfig,
  userId: number,
  now: number,
): Promise<{ code: number; orderId: string }> {
  const orderId = (BigInt(now) * 1000n + BigInt(Math.floor(Math.random() * 1000))).toString();
  const r: Reservation = {
    orderId,
    userId,
    voucherId: cfg.voucherId,
    shopId: cfg.shopId,
    reservedAt: now,
    amount: cfg.payValue,
  };
  const [code] = await scriptsFor(t.deps.redis).reserveStock.exec(
    reserveKeys(cfg, userId, "10.0.0.9", serviceDay(now, t.deps.config.SERVICE_TIME_ZONE), orderId),
    reserveArgs(t.deps.config, r, cfg),
  );
  return { code, orderId };
}

/** Everything a reservation may write for (voucher, user), to compare before/after a refused attempt. */
async function footprint(t: TestApp, cfg: SeckillConfig, userId: number) {
  const { shopId, voucherId } = cfg;
  return {
    stock: await t.deps.redis.get(keys.seckill.stock(shopId, voucherId, 0)),
    buyers: await t.deps.redis.smembers(keys.seckill.buyers(shopId, voucherId)),
    // This user's entries for this voucher (the background drain may ack other entries meanwhile).
    outbox: Object.values((await t.deps.redis.hgetall<Record<string, unknown>>(keys.seckill.outbox(shopId))) ?? {})
      .map(parseReservation)
      .filter((r) => r.voucherId === voucherId && r.userId === userId).length,
    shopLog: await t.deps.redis.zrange(keys.seckill.ruleShop(shopId, userId), 0, -1, { withScores: true }),
    campaignLog: cfg.campaign
      ? await t.deps.redis.zrange(keys.seckill.ruleCampaign(shopId, cfg.campaign, userId), 0, -1, { withScores: true })
      : [],
  };
}

async function redisStock(t: TestApp, cfg: SeckillConfig): Promise<number> {
  return Number((await t.deps.redis.get(keys.seckill.stock(cfg.shopId, cfg.voucherId, 0))) ?? 0);
}

describe("purchase rules: creation", () => {
  test("bad rules are a 400 naming the field, and write nothing; the classic body works unchanged", async () => {
    const t = await createTestApp(ENV);
    const shopId = await createShop(t, await createShopType(t));
    const now = Date.now();
    const base = {
      shopId,
      title: "flash",
      payValue: 8000,
      actualValue: 10000,
      stock: 5,
      beginTime: now - 3600_000,
      endTime: now + 3600_000,
    };
    const count = async () =>
      Number(
        (
          (await t.deps.db.execute("SELECT COUNT(*) AS n FROM tb_seckill_config WHERE shop_id = ?", [shopId]))
            .rows[0] as { n: string }
        ).n,
      );
    const bad: [unknown, string][] = [
      [{ purchaseRules: [shopRule(0, 7)] }, "purchaseRules.0.limit"],
      [{ purchaseRules: [shopRule(1.5, 7)] }, "purchaseRules.0.limit"],
      [{ purchaseRules: [{ scope: "shop", limit: "2", days: 7 }] }, "purchaseRules.0.limit"],
      [{ purchaseRules: [shopRule(101, 7)] }, "purchaseRules.0.limit: must be at most 100"],
      [{ purchaseRules: [shopRule(2, 0)] }, "purchaseRules.0.days"],
      [{ purchaseRules: [shopRule(2, 91)] }, "purchaseRules.0.days: must be at most 90"],
      [{ purchaseRules: [{ scope: "global", limit: 2, days: 7 }] }, "purchaseRules.0.scope"],
      [{ purchaseRules: [{ ...shopRule(2, 7), extra: 1 }] }, "purchaseRules.0"],
      [{ purchaseRules: [shopRule(2, 7), shopRule(1, 1)] }, "purchaseRules.1.scope"],
      [{ purchaseRules: [shopRule(2, 7), campaignRule(1, 1), shopRule(1, 2)], campaign: "c" }, "purchaseRules"],
      [{ purchaseRules: [campaignRule(2, 7)] }, "campaign: required"],
      [{ purchaseRules: [shopRule(2, 7)], campaign: "summer" }, "campaign: only with a campaign rule"],
      [{ campaign: "summer" }, "campaign: only with a campaign rule"],
      [{ purchaseRules: [campaignRule(2, 7)], campaign: "a:b" }, "campaign"],
      [{ purchaseRules: [campaignRule(2, 7)], campaign: "{s1}" }, "campaign"],
      [{ purchaseRules: [campaignRule(2, 7)], campaign: "x".repeat(65) }, "campaign"],
      [{ purchaseRules: [campaignRule(2, 7)], campaign: "" }, "campaign"],
      [{ purchaseRules: { scope: "shop", limit: 1, days: 1 } }, "purchaseRules"],
    ];
    for (const [extra, field] of bad) {
      const res = await call(t.app, "POST", "/api/voucher/seckill", {
        token: operator(t),
        json: { ...base, ...(extra as object) },
      });
      expect(res.status, JSON.stringify(extra)).toBe(400);
      expect(res.body.code).toBe("INVALID_INPUT");
      expect(res.body.errorMsg, JSON.stringify(extra)).toContain(field);
    }
    expect(await count()).toBe(0);

    // The classic body: no rules, no campaign, stored as none.
    const classic = await call<number>(t.app, "POST", "/api/voucher/seckill", { token: operator(t), json: base });
    expect(classic.body.success).toBe(true);
    const row = (
      await t.deps.db.execute("SELECT campaign, purchase_rules FROM tb_seckill_config WHERE voucher_id = ?", [
        classic.body.data,
      ])
    ).rows[0];
    expect(row).toEqual({ campaign: null, purchase_rules: null });
    const cfg = await cfgOf(t, classic.body.data as number);
    expect(cfg.purchaseRules).toEqual([]);
    // The reservation call of a voucher without rules is the one it was before rules existed.
    const r: Reservation = { orderId: "1", userId: 1, voucherId: cfg.voucherId, shopId, reservedAt: now, amount: 1 };
    expect(reserveKeys(cfg, 1, "1.1.1.1", "20260101", "1")).toHaveLength(9);
    expect(reserveArgs(t.deps.config, r, cfg)).toHaveLength(9);
    // Rules come back in canonical order (shop first) whatever the order given.
    const both = await createSeckill(t, {
      stock: 5,
      shopId,
      purchaseRules: [campaignRule(3, 30), shopRule(2, 7)],
      campaign: "summer-2026",
    });
    const bc = await cfgOf(t, both.voucherId);
    expect(bc.purchaseRules).toEqual([shopRule(2, 7), campaignRule(3, 30)]);
    expect(bc.campaign).toBe("summer-2026");
    expect(await t.deps.redis.hget(keys.seckill.meta(shopId, both.voucherId), "rules")).toBe("shop:2:7,campaign:3:30");
  });
});

describe("purchase rules: reservation", () => {
  test("shop rule across two vouchers of a shop: the K-th purchase is allowed, the K+1-th refused with a message naming the rule; vouchers without rules and other shops are not counted", async () => {
    const t = await createTestApp(ENV);
    const a = await createSeckill(t, { stock: 5, purchaseRules: [shopRule(2, 7)] });
    const b = await createSeckill(t, { stock: 5, shopId: a.shopId, purchaseRules: [shopRule(2, 7)] });
    const c = await createSeckill(t, { stock: 5, shopId: a.shopId, purchaseRules: [shopRule(2, 7)] });
    const free = await createSeckill(t, { stock: 5, shopId: a.shopId });
    const elsewhere = await createSeckill(t, { stock: 5, purchaseRules: [shopRule(2, 7)] });
    const [u, other] = userIds(2) as [number, number];
    const ip = "10.0.0.2";
    expect((await reserve(t.deps, { voucherId: a.voucherId, userId: u, ip })).ok).toBe(true);
    expect((await reserve(t.deps, { voucherId: free.voucherId, userId: u, ip })).ok).toBe(true);
    expect((await reserve(t.deps, { voucherId: b.voucherId, userId: u, ip })).ok).toBe(true);
    const cfgC = await cfgOf(t, c.voucherId);
    const before = await footprint(t, cfgC, u);
    const refused = await reserve(t.deps, { voucherId: c.voucherId, userId: u, ip });
    expect(refused).toEqual({
      ok: false,
      reason: "LIMIT_REACHED",
      message: "purchase limit reached: at most 2 per user across this shop in 7 days",
    });
    // A refused attempt writes nothing.
    expect(await footprint(t, cfgC, u)).toEqual(before);
    expect(await redisStock(t, cfgC)).toBe(5);
    expect((await reserve(t.deps, { voucherId: c.voucherId, userId: other, ip })).ok).toBe(true);
    expect((await reserve(t.deps, { voucherId: elsewhere.voucherId, userId: u, ip })).ok).toBe(true);
    expect(await t.deps.redis.zcard(keys.seckill.ruleShop(a.shopId, u))).toBe(2);
    // The route's envelope is the daily limit's: 200, success false, code LIMIT_REACHED, the message.
    const [token] = await sessionsFor(t, [u]);
    const viaRoute = await call(t.app, "POST", `/api/voucher-order/seckill/${c.voucherId}`, { token });
    expect(viaRoute.status).toBe(200);
    expect(viaRoute.body).toEqual({
      success: false,
      code: "LIMIT_REACHED",
      errorMsg: "purchase limit reached: at most 2 per user across this shop in 7 days",
    });
    await t.settle();
  });

  test("rolling N-day window at the script's clock: counted until exactly N days have passed; logs are lengthened, never shortened, and trimmed past the horizon", async () => {
    const t = await createTestApp(ENV);
    const now = Date.now();
    // Sales long enough for the whole test (the sale window is checked before the rules).
    const long = { stock: 10, beginMs: now - 3600_000, endMs: now + 300 * DAY_MS };
    const make = async (rule: ReturnType<typeof shopRule>, shopId?: number) =>
      await cfgOf(t, (await createSeckill(t, { ...long, shopId, purchaseRules: [rule] })).voucherId);
    const a = await make(shopRule(1, 3));
    const b = await make(shopRule(1, 3), a.shopId);
    const c = await make(shopRule(3, 30), a.shopId);
    const d = await make(shopRule(5, 3), a.shopId);
    const e = await make(shopRule(3, 30), a.shopId);
    const f = await make(shopRule(1, 1), a.shopId);
    const [u] = userIds(1) as [number];
    const log = keys.seckill.ruleShop(a.shopId, u);
    const t0 = now;
    const first = await reserveAt(t, a, u, t0);
    expect(first.code).toBe(0);
    // One ms before a's order is 3 days old it still counts; a refusal leaves no trace.
    const before = await footprint(t, b, u);
    expect((await reserveAt(t, b, u, t0 + 3 * DAY_MS - 1)).code).toBe(7);
    expect(await footprint(t, b, u)).toEqual(before);
    // Exactly 3 days later it no longer does.
    expect((await reserveAt(t, b, u, t0 + 3 * DAY_MS)).code).toBe(0);
    // Kept for the 3-day rule's window: not longer, and not without a TTL (-1) or gone (-2).
    const ttl3 = await t.deps.redis.ttl(log);
    expect(ttl3).toBeLessThanOrEqual(3 * 86400);
    expect(ttl3).toBeGreaterThan(3 * 86400 - 60);
    // The 30-day rule counts both (2 < 3) and lengthens the log's TTL to 30 days.
    expect((await reserveAt(t, c, u, t0 + 3 * DAY_MS + 1)).code).toBe(0);
    expect(await t.deps.redis.ttl(log)).toBeGreaterThan(29 * 86400);
    // A 3-day rule sharing the log does not shorten it (its orders count for the 30-day rules).
    expect((await reserveAt(t, d, u, t0 + 3 * DAY_MS + 2)).code).toBe(0);
    expect(await t.deps.redis.ttl(log)).toBeGreaterThan(29 * 86400);
    expect((await reserveAt(t, e, u, t0 + 3 * DAY_MS + 3)).code).toBe(7);
    // Past the horizon (PURCHASE_RULE_MAX_DAYS = 90) a successful reservation trims old entries.
    expect(await t.deps.redis.zscore(log, first.orderId)).not.toBeNull();
    expect((await reserveAt(t, f, u, t0 + 91 * DAY_MS)).code).toBe(0);
    expect(await t.deps.redis.zscore(log, first.orderId)).toBeNull();
    // b, c, d (3 days after t0) are younger than the horizon and stay, with f's order.
    expect(await t.deps.redis.zcard(log)).toBe(4);
  });

  test("campaign rule K=2: one user firing 50 parallel attempts across 5 vouchers of the campaign gets exactly 2; the campaign is per shop", async () => {
    const t = await createTestApp(ENV);
    const rules = [campaignRule(2, 30)];
    const first = await createSeckill(t, { stock: 20, purchaseRules: rules, campaign: "summer" });
    const vouchers = [
      first,
      ...(await Promise.all(
        Array.from({ length: 4 }, () =>
          createSeckill(t, { stock: 20, shopId: first.shopId, purchaseRules: rules, campaign: "summer" }),
        ),
      )),
    ];
    const [u, v] = userIds(2) as [number, number];
    const [token] = await sessionsFor(t, [u]);
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        call<string>(t.app, "POST", `/api/voucher-order/seckill/${vouchers[i % 5]?.voucherId}`, { token }),
      ),
    );
    const wins = results.filter((r) => r.body.success);
    expect(wins).toHaveLength(2);
    expect(
      results.every(
        (r) =>
          r.status === 200 && (r.body.success || r.body.code === "LIMIT_REACHED" || r.body.code === "DUPLICATE_ORDER"),
      ),
    ).toBe(true);
    expect(results.find((r) => r.body.code === "LIMIT_REACHED")?.body.errorMsg).toBe(
      'purchase limit reached: at most 2 per user across campaign "summer" in 30 days',
    );
    let stock = 0;
    for (const x of vouchers) stock += await redisStock(t, await cfgOf(t, x.voucherId));
    expect(stock).toBe(5 * 20 - 2);
    // (The SDK's automatic deserialization turns some order ids into numbers: compare as strings.)
    expect(
      (await t.deps.redis.zrange(keys.seckill.ruleCampaign(first.shopId, "summer", u), 0, -1)).map(String).sort(),
    ).toEqual(wins.map((w) => w.body.data as string).sort());
    // Another user is not affected; a campaign of the same name in another shop is another campaign.
    expect((await reserve(t.deps, { voucherId: vouchers[0]?.voucherId as number, userId: v, ip: "10.0.0.3" })).ok).toBe(
      true,
    );
    const otherShop = await createSeckill(t, { stock: 5, purchaseRules: rules, campaign: "summer" });
    expect((await reserve(t.deps, { voucherId: otherShop.voucherId, userId: u, ip: "10.0.0.3" })).ok).toBe(true);
    await t.settle();
  }, 30_000);

  test("a campaign's rule belongs to the campaign: a second voucher with another limit is refused (400, nothing written), also when created concurrently", async () => {
    const t = await createTestApp(ENV);
    const first = await createSeckill(t, { stock: 5, purchaseRules: [campaignRule(1, 30)], campaign: "once" });
    const now = Date.now();
    const body = (limit: number, campaign = "once") => ({
      shopId: first.shopId,
      title: "flash",
      payValue: 8000,
      actualValue: 10000,
      stock: 5,
      beginTime: now - 3600_000,
      endTime: now + 3600_000,
      purchaseRules: [{ scope: "campaign", limit, days: 30 }],
      campaign,
    });
    const vouchersBefore = Number(
      (
        (await t.deps.db.execute("SELECT COUNT(*) AS n FROM tb_voucher WHERE shop_id = ?", [first.shopId])).rows[0] as {
          n: string;
        }
      ).n,
    );
    const other = await call(t.app, "POST", "/api/voucher/seckill", { token: operator(t), json: body(2) });
    expect(other.status).toBe(400);
    expect(other.body.errorMsg).toContain('campaign "once" already has the rule 1 per user in 30 days');
    // The same rule is fine.
    expect(
      (await call(t.app, "POST", "/api/voucher/seckill", { token: operator(t), json: body(1) })).body.success,
    ).toBe(true);
    // Two new campaigns' first vouchers created at once with different limits: exactly one wins.
    const raced = await Promise.all([
      call(t.app, "POST", "/api/voucher/seckill", { token: operator(t), json: body(1, "race") }),
      call(t.app, "POST", "/api/voucher/seckill", { token: operator(t), json: body(3, "race") }),
    ]);
    expect(raced.map((r) => r.status).sort()).toEqual([200, 400]);
    const vouchersAfter = Number(
      (
        (await t.deps.db.execute("SELECT COUNT(*) AS n FROM tb_voucher WHERE shop_id = ?", [first.shopId])).rows[0] as {
          n: string;
        }
      ).n,
    );
    expect(vouchersAfter - vouchersBefore).toBe(2);
  });

  test("shop and campaign rules on one voucher: each is checked, the first that is full refuses", async () => {
    const t = await createTestApp(ENV);
    const shop = await createSeckill(t, { stock: 5, purchaseRules: [shopRule(3, 7)] });
    const both = [shopRule(3, 7), campaignRule(1, 7)];
    const c1 = await createSeckill(t, { stock: 5, shopId: shop.shopId, purchaseRules: both, campaign: "gold" });
    const c2 = await createSeckill(t, { stock: 5, shopId: shop.shopId, purchaseRules: both, campaign: "gold" });
    const s2 = await createSeckill(t, { stock: 5, shopId: shop.shopId, purchaseRules: [shopRule(3, 7)] });
    const s3 = await createSeckill(t, { stock: 5, shopId: shop.shopId, purchaseRules: [shopRule(3, 7)] });
    const [u] = userIds(1) as [number];
    const ip = "10.0.0.4";
    expect((await reserve(t.deps, { voucherId: c1.voucherId, userId: u, ip })).ok).toBe(true);
    expect(await reserve(t.deps, { voucherId: c2.voucherId, userId: u, ip })).toMatchObject({
      reason: "LIMIT_REACHED",
      message: expect.stringContaining('campaign "gold"'),
    });
    expect((await reserve(t.deps, { voucherId: shop.voucherId, userId: u, ip })).ok).toBe(true);
    expect((await reserve(t.deps, { voucherId: s2.voucherId, userId: u, ip })).ok).toBe(true);
    expect(await reserve(t.deps, { voucherId: s3.voucherId, userId: u, ip })).toMatchObject({
      reason: "LIMIT_REACHED",
      message: expect.stringContaining("this shop"),
    });
    await t.settle();
  });
});

describe("purchase rules: releases and reloads", () => {
  test("closing an unpaid order past its deadline gives the quota back, once: a second close gives nothing back", async () => {
    const clock = { skewMs: 0, now: () => Date.now() + clock.skewMs };
    const t = await serveTestApp(ENV, { clock });
    try {
      const a = await createSeckill(t, { stock: 5, purchaseRules: [shopRule(1, 7)] });
      const b = await createSeckill(t, { stock: 5, shopId: a.shopId, purchaseRules: [shopRule(1, 7)] });
      const c = await createSeckill(t, { stock: 5, shopId: a.shopId, purchaseRules: [shopRule(1, 7)] });
      const [u] = userIds(1) as [number];
      const ip = "10.0.0.5";
      const first = await reserve(t.deps, { voucherId: a.voucherId, userId: u, ip });
      if (!first.ok) throw new Error("first reservation refused");
      expect(await reserve(t.deps, { voucherId: b.voucherId, userId: u, ip })).toMatchObject({
        reason: "LIMIT_REACHED",
      });
      await t.settle();
      await eventually(
        "order written",
        async () =>
          (await t.deps.db.execute("SELECT 1 FROM tb_voucher_order WHERE id = ?", [BigInt(first.orderId)])).rows
            .length === 1,
      );
      // Past the payment deadline the close-expired job cancels it and releases it in Redis.
      clock.skewMs = 86_400_000 + 60_000;
      expect((await closeExpired(t.deps, clock.now())).closed).toBeGreaterThanOrEqual(1);
      expect(await t.deps.redis.zscore(keys.seckill.ruleShop(a.shopId, u), first.orderId)).toBeNull();
      clock.skewMs = 0;
      const second = await reserve(t.deps, { voucherId: b.voucherId, userId: u, ip });
      expect(second.ok).toBe(true);
      // Closing the first order again (redelivery, an operator) gives nothing back a second time.
      expect(await closeOrder(t.deps, first.orderId)).toBe("already-cancelled");
      expect(await t.deps.redis.zcard(keys.seckill.ruleShop(a.shopId, u))).toBe(1);
      expect(await reserve(t.deps, { voucherId: c.voucherId, userId: u, ip })).toMatchObject({
        reason: "LIMIT_REACHED",
      });
      // A reservation closed before it reached MySQL gives its quota back too.
      if (!second.ok) throw new Error("unreachable");
      expect(await closeOrder(t.deps, second.orderId)).toMatch(/^cancelled/);
      expect((await reserve(t.deps, { voucherId: c.voucherId, userId: u, ip })).ok).toBe(true);
    } finally {
      await t.settle();
      await t.stop();
    }
  }, 60_000);

  test("reconcile repairs a close that died between its commit and its release: the quota comes back (also when the buyer was lost from Redis)", async () => {
    const t = await createTestApp(ENV);
    const a = await createSeckill(t, { stock: 5, purchaseRules: [shopRule(1, 7)] });
    const b = await createSeckill(t, { stock: 5, shopId: a.shopId, purchaseRules: [shopRule(1, 7)] });
    const [u, w] = userIds(2) as [number, number];
    const ip = "10.0.0.7";
    const ids: string[] = [];
    for (const user of [u, w]) {
      const res = await reserve(t.deps, { voucherId: a.voucherId, userId: user, ip });
      if (!res.ok) throw new Error("reservation refused");
      await t.settle();
      const r = await findReservation(t.deps, res.orderId);
      if (!r) throw new Error("reservation not in the outbox");
      await writeOrder(t.deps, r);
      ids.push(res.orderId);
    }
    // The close's MySQL transaction committed (a minute ago), then the process died before the Redis release.
    await t.deps.db.execute(
      "UPDATE tb_voucher_order SET status = 4, update_time = NOW() - INTERVAL 2 MINUTE WHERE id IN (?, ?)",
      ids.map((id) => BigInt(id)),
    );
    await t.deps.db.execute("UPDATE tb_seckill_voucher SET stock = stock + 2 WHERE voucher_id = ?", [a.voucherId]);
    // w was also lost from the buyers set: reconcile marks that order released without a release.
    await t.deps.redis.srem(keys.seckill.buyers(a.shopId, a.voucherId), String(w));
    expect(await reserve(t.deps, { voucherId: b.voucherId, userId: u, ip })).toMatchObject({ reason: "LIMIT_REACHED" });
    await reconcile(t.deps, Date.now());
    for (const [user, id] of [
      [u, ids[0]],
      [w, ids[1]],
    ] as const) {
      expect(await t.deps.redis.zscore(keys.seckill.ruleShop(a.shopId, user), id as string)).toBeNull();
      expect((await reserve(t.deps, { voucherId: b.voucherId, userId: user, ip })).ok).toBe(true);
    }
    await t.settle();
  });

  test("reconcile's 'mark released' repair also gives back the daily shop counter, once", async () => {
    const t = await createTestApp(ENV);
    const a = await createSeckill(t, { stock: 5, shopDailyLimit: 1 });
    const b = await createSeckill(t, { stock: 5, shopId: a.shopId, shopDailyLimit: 1 });
    const [w] = userIds(1) as [number];
    const ip = "10.0.0.8";
    const res = await reserve(t.deps, { voucherId: a.voucherId, userId: w, ip });
    if (!res.ok) throw new Error("reservation refused");
    await t.settle();
    const r = await findReservation(t.deps, res.orderId);
    if (!r) throw new Error("reservation not in the outbox");
    await writeOrder(t.deps, r);
    // Closed in MySQL a while ago; the close died before its release, and the buyer was lost from Redis.
    await t.deps.db.execute(
      "UPDATE tb_voucher_order SET status = 4, update_time = NOW() - INTERVAL 2 MINUTE WHERE id = ?",
      [BigInt(res.orderId)],
    );
    await t.deps.db.execute("UPDATE tb_seckill_voucher SET stock = stock + 1 WHERE voucher_id = ?", [a.voucherId]);
    await t.deps.redis.srem(keys.seckill.buyers(a.shopId, a.voucherId), String(w));
    expect(await reserve(t.deps, { voucherId: b.voucherId, userId: w, ip })).toMatchObject({ reason: "LIMIT_REACHED" });
    await reconcile(t.deps, Date.now());
    await reconcile(t.deps, Date.now()); // a second pass gives nothing back twice
    const day = keys.seckill.daily(a.shopId, w, serviceDay(r.reservedAt, t.deps.config.SERVICE_TIME_ZONE));
    expect(await t.deps.redis.scard(day)).toBe(0);
    expect((await reserve(t.deps, { voucherId: b.voucherId, userId: w, ip })).ok).toBe(true);
    await t.settle();
  });

  test("rules survive a Redis reload: the vouchers' keys, rule logs and cached config deleted, reconcile reloads them from MySQL with the holders' logs and the rules still hold", async () => {
    const t = await createTestApp(ENV);
    const a = await cfgOf(t, (await createSeckill(t, { stock: 5, purchaseRules: [shopRule(1, 7)] })).voucherId);
    const b = await cfgOf(
      t,
      (
        await createSeckill(t, {
          stock: 5,
          shopId: a.shopId,
          purchaseRules: [shopRule(1, 7), campaignRule(1, 7)],
          campaign: "c1",
        })
      ).voucherId,
    );
    const [u, w, x] = userIds(3) as [number, number, number];
    const ip = "10.0.0.6";
    const held = await reserve(t.deps, { voucherId: a.voucherId, userId: u, ip });
    if (!held.ok) throw new Error("reservation refused");
    // x's order was closed in MySQL, and the close died before its Redis release.
    const closed = await reserve(t.deps, { voucherId: a.voucherId, userId: x, ip });
    if (!closed.ok) throw new Error("reservation refused");
    await t.settle();
    const r = await findReservation(t.deps, closed.orderId);
    if (!r) throw new Error("reservation not in the outbox");
    await writeOrder(t.deps, r);
    await t.deps.db.execute("UPDATE tb_voucher_order SET status = 4 WHERE id = ?", [BigInt(closed.orderId)]);
    await t.deps.db.execute("UPDATE tb_seckill_voucher SET stock = stock + 1 WHERE voucher_id = ?", [a.voucherId]);
    // As after a flush: the user's rule logs are gone too.
    await t.deps.redis.del(keys.seckill.ruleShop(a.shopId, u), keys.seckill.ruleCampaign(a.shopId, "c1", u));
    for (const cfg of [a, b]) {
      await t.deps.redis.del(
        keys.seckill.meta(cfg.shopId, cfg.voucherId),
        keys.seckill.buyers(cfg.shopId, cfg.voucherId),
        keys.seckill.released(cfg.shopId, cfg.voucherId),
        keys.seckill.stock(cfg.shopId, cfg.voucherId, 0),
        keys.cache("seckill", cfg.voucherId),
      );
    }
    // A fresh isolate (no L1) that loads the config from MySQL.
    const fresh = await createTestApp(ENV);
    await reconcile(fresh.deps, Date.now());
    expect(await fresh.deps.redis.hget(keys.seckill.meta(b.shopId, b.voucherId), "rules")).toBe(
      "shop:1:7,campaign:1:7",
    );
    expect(await fresh.deps.redis.hget(keys.seckill.meta(b.shopId, b.voucherId), "campaign")).toBe("c1");
    // The holder's order is back in its shop log, scored with its reservation time (MySQL keeps whole seconds).
    const score = Number(await fresh.deps.redis.zscore(keys.seckill.ruleShop(a.shopId, u), held.orderId));
    expect(Math.abs(score - Date.now())).toBeLessThan(60_000);
    expect(await fresh.deps.redis.ttl(keys.seckill.ruleShop(a.shopId, u))).toBeGreaterThan(6 * 86400);
    expect(await reserve(fresh.deps, { voucherId: b.voucherId, userId: u, ip })).toMatchObject({
      reason: "LIMIT_REACHED",
    });
    expect((await reserve(fresh.deps, { voucherId: b.voucherId, userId: w, ip })).ok).toBe(true);
    expect(await reserve(fresh.deps, { voucherId: a.voucherId, userId: w, ip })).toMatchObject({
      reason: "LIMIT_REACHED",
    });
    // The closed order gave its quota back.
    expect(await fresh.deps.redis.zscore(keys.seckill.ruleShop(a.shopId, x), closed.orderId)).toBeNull();
    expect((await reserve(fresh.deps, { voucherId: b.voucherId, userId: x, ip })).ok).toBe(true);
    await fresh.settle();
  });
});

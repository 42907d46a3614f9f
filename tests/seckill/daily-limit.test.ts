/**
 * The daily shop limit when a voucher's Redis keys are lost and reconcile reloads them (issue 16
 * item 11: "reconcile's … reload give[s] back rule quota but not the daily shop counter").
 *
 * The per-user daily key is a set of order ids (lua/reserve-stock.lua), outside the voucher's keys:
 * a release takes its own order out, so the reload can take every settled order out without
 * knowing whether its release already ran — a second give-back is a no-op. With an integer counter
 * neither was safe: not giving back left a user refused for an order MySQL cancelled; giving back
 * could hand a quota back twice.
 */
import { expect, test } from "bun:test";
import { keys } from "../../src/redis/keys.ts";
import { closeOrder, findReservation, writeOrder } from "../../src/services/seckill/orders.ts";
import { reconcile } from "../../src/services/seckill/reconcile.ts";
import { reserve } from "../../src/services/seckill/reserve.ts";
import { serviceDay } from "../../src/util/time.ts";
import { createSeckill, userIds } from "../support/seckill.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";

const ENV = {
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: "0",
  SOLD_OUT_MEMO_MS: "0",
};
const IP = "10.0.7.1";

/** Reserves and writes the order to MySQL; returns its id. */
async function bought(t: TestApp, voucherId: number, userId: number): Promise<string> {
  const res = await reserve(t.deps, { voucherId, userId, ip: IP });
  if (!res.ok) throw new Error(`reservation refused: ${res.reason}`);
  await t.settle();
  const r = await findReservation(t.deps, res.orderId);
  if (!r) throw new Error("reservation not in the outbox");
  await writeOrder(t.deps, r);
  return res.orderId;
}

/** Redis loses every key of the voucher (one bucket): the next reconcile reloads it from MySQL. */
async function loseVoucherKeys(t: TestApp, shopId: number, voucherId: number): Promise<void> {
  await t.deps.redis.del(
    keys.seckill.meta(shopId, voucherId),
    keys.seckill.buyers(shopId, voucherId),
    keys.seckill.released(shopId, voucherId),
    keys.seckill.stock(shopId, voucherId, 0),
  );
}

const reason = async (t: TestApp, voucherId: number, userId: number) => {
  const r = await reserve(t.deps, { voucherId, userId, ip: IP });
  return r.ok ? "ok" : r.reason;
};

test("an order cancelled in MySQL whose release was lost gives its daily quota back once when the voucher is reloaded", async () => {
  const t = await createTestApp(ENV);
  const a = await createSeckill(t, { stock: 5, buckets: 1, shopDailyLimit: 1 });
  const b = await createSeckill(t, { stock: 5, buckets: 1, shopDailyLimit: 1, shopId: a.shopId });
  const c = await createSeckill(t, { stock: 5, buckets: 1, shopDailyLimit: 1, shopId: a.shopId });
  const [u] = userIds(1) as [number];
  const oa = await bought(t, a.voucherId, u);
  // Cancelled in MySQL a while ago (settled); the close died before its Redis release.
  await t.deps.db.execute(
    "UPDATE tb_voucher_order SET status = 4, update_time = NOW() - INTERVAL 2 MINUTE WHERE id = ?",
    [BigInt(oa)],
  );
  await t.deps.db.execute("UPDATE tb_seckill_voucher SET stock = stock + 1 WHERE voucher_id = ?", [a.voucherId]);
  expect(await reason(t, b.voucherId, u)).toBe("LIMIT_REACHED");
  await loseVoucherKeys(t, a.shopId, a.voucherId);

  await reconcile(t.deps, Date.now());
  await reconcile(t.deps, Date.now()); // a second pass gives nothing back twice
  expect(await t.deps.redis.exists(keys.seckill.meta(a.shopId, a.voucherId))).toBe(1);
  expect(await reason(t, b.voucherId, u)).toBe("ok");
  // The quota is spent again by b's order: nothing handed out twice.
  await reconcile(t.deps, Date.now());
  expect(await reason(t, c.voucherId, u)).toBe("LIMIT_REACHED");
  await t.settle();
});

test("an order released before the voucher's keys were lost is not given back again by the reload (the user's next order still counts)", async () => {
  const t = await createTestApp(ENV);
  const a = await createSeckill(t, { stock: 5, buckets: 1, shopDailyLimit: 1 });
  const b = await createSeckill(t, { stock: 5, buckets: 1, shopDailyLimit: 1, shopId: a.shopId });
  const c = await createSeckill(t, { stock: 5, buckets: 1, shopDailyLimit: 1, shopId: a.shopId });
  const [u] = userIds(1) as [number];
  const oa = await bought(t, a.voucherId, u);
  expect(await closeOrder(t.deps, oa)).toBe("cancelled"); // released in Redis: quota back
  const ob = await bought(t, b.voucherId, u); // and spent on b
  const daily = keys.seckill.daily(a.shopId, u, serviceDay(Date.now(), t.deps.config.SERVICE_TIME_ZONE));
  expect(await t.deps.redis.smembers(daily)).toEqual([ob]);
  await t.deps.db.execute("UPDATE tb_voucher_order SET update_time = NOW() - INTERVAL 2 MINUTE WHERE id = ?", [
    BigInt(oa),
  ]);
  await loseVoucherKeys(t, a.shopId, a.voucherId);

  await reconcile(t.deps, Date.now());
  expect(await t.deps.redis.exists(keys.seckill.meta(a.shopId, a.voucherId))).toBe(1);
  expect(await t.deps.redis.smembers(daily)).toEqual([ob]);
  expect(await reason(t, c.voucherId, u)).toBe("LIMIT_REACHED");
  await t.settle();
});

test("a daily counter written before the change (an integer) is still counted, incremented and given back", async () => {
  const t = await createTestApp(ENV);
  const a = await createSeckill(t, { stock: 5, buckets: 1, shopDailyLimit: 2 });
  const [u, w] = userIds(2) as [number, number];
  const day = serviceDay(Date.now(), t.deps.config.SERVICE_TIME_ZONE);
  // u bought twice today before the deploy: refused now.
  await t.deps.redis.set(keys.seckill.daily(a.shopId, u, day), "2", { ex: 3600 });
  expect(await reason(t, a.voucherId, u)).toBe("LIMIT_REACHED");
  // w once: one more, counted on the integer.
  await t.deps.redis.set(keys.seckill.daily(a.shopId, w, day), "1", { ex: 3600 });
  const ow = await bought(t, a.voucherId, w);
  expect(await t.deps.redis.get(keys.seckill.daily(a.shopId, w, day))).toBe(2);
  expect(await closeOrder(t.deps, ow)).toBe("cancelled");
  expect(await t.deps.redis.get(keys.seckill.daily(a.shopId, w, day))).toBe(1);
  await t.settle();
});

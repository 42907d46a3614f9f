/**
 * Concurrent reservations share one Upstash pipeline request per event-loop turn
 * (src/redis/script-batch.ts): one command per attempt, far fewer round trips.
 */
import { expect, test } from "bun:test";
import { keys } from "../../src/redis/keys.ts";
import { reserve } from "../../src/services/seckill/reserve.ts";
import { createSeckill, userIds } from "../support/seckill.ts";
import { createTestApp } from "../support/stack.ts";

const ENV = { SECKILL_USER_LIMIT: "0", SECKILL_IP_LIMIT: "0", SOLD_OUT_MEMO_MS: "0" };

test("200 concurrent reservations cost 200 commands in a handful of round trips, and sell exactly the stock", async () => {
  const t = await createTestApp(ENV);
  const { shopId, voucherId } = await createSeckill(t, { stock: 150 });
  await reserve(t.deps, { voucherId, userId: userIds(1)[0] as number, ip: "10.0.0.1" }); // warm config cache, id lease, script
  const before = t.stack.rest.stats();
  const res = await Promise.all(userIds(200).map((userId) => reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })));
  const after = t.stack.rest.stats();
  expect(res.filter((r) => r.ok).length).toBe(149);
  expect(res.filter((r) => !r.ok && r.reason === "SOLD_OUT").length).toBe(51);
  // 200 reserve EVALSHAs (plus, at most, the warm-up reservation's batched index write)...
  expect(after.commands - before.commands).toBeGreaterThanOrEqual(200);
  expect(after.commands - before.commands).toBeLessThanOrEqual(202);
  // ...in a few pipeline requests, not 200 round trips.
  expect(after.requests - before.requests).toBeLessThanOrEqual(5);
  expect(t.deps.isolate.reserveBatch.stats.largest).toBeGreaterThan(100);
  await t.settle();
  expect(Number(await t.deps.redis.get(keys.seckill.stock(shopId, voucherId, 0)))).toBe(0);
});

test("after SCRIPT FLUSH a batch falls back to EVAL per call and every reservation still gets its answer", async () => {
  const t = await createTestApp(ENV);
  const { voucherId } = await createSeckill(t, { stock: 30 });
  await t.deps.redis.scriptFlush();
  const res = await Promise.all(userIds(40).map((userId) => reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })));
  expect(res.filter((r) => r.ok).length).toBe(30);
  expect(res.filter((r) => !r.ok && r.reason === "SOLD_OUT").length).toBe(10);
  await t.settle();
});

test("on workerd (requests may not share in-flight I/O) every reservation is its own request: no pipeline, one command each, and the stock sells exactly", async () => {
  const { runtimes } = await import("../../src/runtime.ts");
  const t = await createTestApp(ENV, { runtime: runtimes.workerd });
  const { shopId, voucherId } = await createSeckill(t, { stock: 40 });
  await reserve(t.deps, { voucherId, userId: userIds(1)[0] as number, ip: "10.0.0.1" }); // warm config cache, id block, script
  await t.settle();
  const before = t.stack.rest.stats();
  const res = await Promise.all(userIds(60).map((userId) => reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })));
  const after = t.stack.rest.stats();
  expect(res.filter((r) => r.ok).length).toBe(39);
  expect(res.filter((r) => !r.ok && r.reason === "SOLD_OUT").length).toBe(21);
  expect(t.deps.isolate.reserveBatch.stats.pipelines).toBe(0);
  // One REST request per attempt (auto-pipelining is off there too), plus background index/drain work.
  expect(after.requests - before.requests).toBeGreaterThanOrEqual(60);
  expect(after.commands - before.commands).toBeLessThanOrEqual(60 + 4);
  await t.settle();
  expect(Number(await t.deps.redis.get(keys.seckill.stock(shopId, voucherId, 0)))).toBe(0);
});

/**
 * Trip budgets: each hot operation, run against an in-process app on the real stack with fresh
 * users and ids, may make at most its budget of SEQUENTIAL dependency trips on its critical path.
 *
 * Counted at the ports, not by timing: every guarded call (one HTTP request to Redis, PlanetScale,
 * QStash, SMS or payments) records itself in the request's trips (src/ports/trips.ts), which the
 * response reports in `Server-Timing`. Sequential trips = the longest chain of calls in which each
 * call started after the previous one had answered (a call's depth is 1 + the deepest call already
 * answered when it started; calls made together — Promise.all, one pipeline — share a depth). Calls
 * still in flight when the response is written (waitUntil work) are not on the critical path and
 * are not counted. With the dependencies at a distance, latency ≈ sequential trips × RTT.
 *
 * Budgets are today's measured values (a regression fails); where the design target of the trip
 * work differs it is noted beside the budget. Each operation runs once to warm the isolate (script
 * loading, session cache), then REPS times with fresh data; the largest count is held.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { insertShop } from "../../src/services/shops.ts";
import { createShopType } from "../support/fixtures.ts";
import { call } from "../support/http.ts";
import { newShop } from "../support/social.ts";
import { type ServedApp, serveTestApp } from "../support/stack.ts";
import { inProcessCaller, OPERATIONS, type OperationContext, type Trips, tripsOf } from "../support/trip-operations.ts";

const REPS = 2;

const ENV = {
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  LOCAL_PAYMENT_DELAY_MS: "0",
  // Production's admission lease (createTestApp turns it off by default): part of an attempt's trips.
  SECKILL_ADMISSION_PER_SECOND: "",
};

let t: ServedApp;
const measured = new Map<string, Trips[]>();

beforeAll(async () => {
  t = await serveTestApp(ENV);
}, 120_000);

afterAll(async () => {
  await t.settle();
  await t.stop();
  const rows = [...measured].map(([name, runs]) => {
    const max = (f: (x: Trips) => number) => Math.max(...runs.map(f));
    return `${name.padEnd(40)} ${String(max((x) => x.sequential)).padStart(4)} ${String(max((x) => x.redisTrips)).padStart(6)} ${String(max((x) => x.redisCommands)).padStart(6)} ${String(max((x) => x.dbTrips)).padStart(4)} ${String(max((x) => x.qstashTrips)).padStart(7)}`;
  });
  console.log(
    `\n${"operation".padEnd(40)} ${"seq".padStart(4)} ${"redis".padStart(6)} ${"cmds".padStart(6)} ${"db".padStart(4)} ${"qstash".padStart(7)}\n${rows.join("\n")}`,
  );
});

/** A shop in MySQL only: neither L1 nor Redis has seen it. */
async function coldShop(typeId: number): Promise<number> {
  return await insertShop(t.deps, {
    name: `cold-${crypto.randomUUID().slice(0, 8)}`,
    typeId,
    images: "/imgs/a.jpg",
    area: "test",
    address: "test road 1",
    x: 120.149993,
    y: 30.334229,
    avgPrice: 80,
    openHours: "10:00-22:00",
  });
}

describe("trip budgets (sequential dependency trips on the critical path, counted at the ports)", () => {
  for (const [name, op] of Object.entries(OPERATIONS)) {
    const budget = op.budget;
    if (budget === undefined) continue;
    test(`${name}: at most ${budget}${op.target !== undefined ? ` (target ${op.target})` : ""}`, async () => {
      const runs: Trips[] = [];
      const c: OperationContext = { setup: t, call: inProcessCaller(t), settle: () => t.settle() };
      for (let rep = 0; rep <= REPS; rep++) {
        const answer = await op.run(c);
        const res = Array.isArray(answer) ? answer[answer.length - 1]! : answer;
        expect(op.ok ? op.ok(res.body) : res.body.success).toBe(true);
        // Background work of the setup and of this request must not leak into the next count.
        await t.settle();
        const trips = tripsOf(res.headers);
        if (trips === null) throw new Error(`${name}: response without Server-Timing`);
        if (rep > 0) runs.push(trips);
      }
      measured.set(name, runs);
      expect(Math.max(...runs.map((r) => r.sequential))).toBeLessThanOrEqual(budget);
    }, 60_000);
  }
});

test("a response that made no trip says so; one that did names its dependencies", async () => {
  const id = await newShop(t);
  await call(t.app, "GET", `/api/shop/${id}`);
  const warm = await call(t.app, "GET", `/api/shop/${id}`);
  expect(warm.headers.get("server-timing")).toBe('trips;desc="0 in sequence"');
  const cold = await call(t.app, "GET", `/api/shop/${await coldShop(await createShopType(t))}`);
  expect(cold.headers.get("server-timing")).toMatch(/^redis;desc="\d+ trips?[^"]*";dur=[\d.]+, db;desc="1 trip";dur=/);
});

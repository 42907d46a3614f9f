/**
 * The Upstash-REST stand-in's command-rate cap (scripts/stack/upstash-rest.ts): commands counted
 * per wall-clock second, a request that would pass the cap refused whole the way Upstash refuses
 * over-quota requests (400 + {"error":"ERR max …"}), seen through the production @upstash/redis
 * client. A pinned clock makes the second windows exact; one test runs on the real clock.
 */
import { afterAll, beforeAll, beforeEach, expect, test } from "bun:test";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { errors, Redis } from "@upstash/redis";
import { startRedis, type Engine } from "../../scripts/stack/engines.ts";
import {
  startUpstashRest,
  THROTTLED_ERROR_PREFIX,
  THROTTLED_STATUS,
  type UpstashRestServer,
} from "../../scripts/stack/upstash-rest.ts";

process.env.UPSTASH_DISABLE_TELEMETRY = "1";

const TOKEN = "test-token-upstash-throttle";
let dir: string;
let engine: Engine;
/** Cap 100/s on a clock the tests move by hand. */
let capped: UpstashRestServer;
/** Ms since the epoch as `capped` sees it; starts on a second boundary. */
let clock = 1_800_000_000_000;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "upstash-throttle-test-"));
  engine = await startRedis({ dir });
  capped = await startUpstashRest({
    redisHost: engine.host,
    redisPort: engine.port,
    token: TOKEN,
    maxCommandsPerSecond: 100,
    now: () => clock,
  });
});

afterAll(async () => {
  await capped?.stop();
  await engine?.stop();
  rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => {
  // Every test starts in a second of its own, with the cap it expects and fresh stats.
  clock += 1000;
  capped.setLimits({ commandsPerSecond: 100 });
  capped.resetStats();
});

function sdk(url: string, opts: { enableAutoPipelining?: boolean } = {}): Redis {
  return new Redis({ url, token: TOKEN, retry: false, enableAutoPipelining: false, ...opts });
}

const key = (name: string) => `throttle:${name}:${randomUUID()}`;
const auth = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };

/** The error an SDK call rejected with (fails the test if it resolved). */
async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (e) {
    return e as Error;
  }
  throw new Error("expected the call to be refused as throttled");
}

function expectThrottled(e: unknown, cap = 100): void {
  expect(e).toBeInstanceOf(errors.UpstashError);
  expect((e as Error).message.startsWith(`${THROTTLED_ERROR_PREFIX}. Limit: ${cap}, Usage: `)).toBe(true);
}

test("with a cap of 100/s a burst of 150 commands gets 100 answers and 50 throttled errors; the next second serves again", async () => {
  const redis = sdk(capped.url);
  const k = key("burst");
  const results = await Promise.allSettled(Array.from({ length: 150 }, () => redis.incr(k)));
  const ok = results.filter((r) => r.status === "fulfilled");
  const refused = results.flatMap((r) => (r.status === "rejected" ? [r.reason] : []));
  expect(ok).toHaveLength(100);
  expect(refused).toHaveLength(50);
  for (const e of refused) expectThrottled(e);
  // The SDK does not retry a throttled reply (it retries only a fetch that throws) and names the command.
  expect((refused[0] as Error).message).toEndWith(`, command was: ["incr","${k}"]`);

  // Still the same second: even a read is refused; a throttled request never reached Redis.
  expectThrottled(await rejection(redis.get(k)));
  clock += 1000;
  expect(await redis.get<number>(k)).toBe(100);
  const again = await Promise.allSettled(Array.from({ length: 99 }, () => redis.incr(k)));
  expect(again.every((r) => r.status === "fulfilled")).toBe(true);

  expect(capped.stats()).toMatchObject({
    requests: 200,
    commands: 200,
    throttledRequests: 51,
    throttledCommands: 51,
    maxPerSecond: 100,
    maxOfferedPerSecond: 151,
  });
});

test("the throttled reply is a 400 with one Upstash-style error object, for single commands, pipelines and transactions", async () => {
  await fetch(`${capped.url}/pipeline`, {
    method: "POST",
    headers: auth,
    body: JSON.stringify(Array.from({ length: 100 }, () => ["PING"])),
  });
  for (const [path, body, usage] of [
    ["", ["GET", "x"], 101],
    [
      "/pipeline",
      [
        ["GET", "x"],
        ["GET", "y"],
      ],
      102,
    ],
    [
      "/multi-exec",
      [
        ["INCR", "x"],
        ["INCR", "y"],
        ["INCR", "z"],
      ],
      103,
    ],
  ] as const) {
    const res = await fetch(capped.url + path, { method: "POST", headers: auth, body: JSON.stringify(body) });
    expect(res.status).toBe(THROTTLED_STATUS);
    expect(await res.text()).toBe(
      `{"error":"ERR max commands per second limit exceeded. Limit: 100, Usage: ${usage}."}`,
    );
  }
});

test("pipelines and transactions count each of their commands, and one over the cap is refused whole", async () => {
  const redis = sdk(capped.url);
  const k = key("pipe");
  expect(await redis.pipeline().incr(k).incr(k).incr(k).exec()).toEqual([1, 2, 3]); // 3
  const p57 = redis.pipeline();
  for (let i = 0; i < 57; i++) p57.incr(k);
  await p57.exec(); // 60

  const p50 = redis.pipeline();
  for (let i = 0; i < 50; i++) p50.incr(`${k}:refused`);
  expectThrottled(await rejection(p50.exec())); // 60 + 50 > 100: none of it runs

  const p40 = redis.pipeline();
  for (let i = 0; i < 40; i++) p40.incr(k);
  expect((await p40.exec()).at(-1)).toBe(100); // exactly the cap
  expectThrottled(await rejection(redis.multi().incr(k).exec()));

  clock += 1000;
  expect(await redis.multi().get(k).get(`${k}:refused`).exec()).toEqual([100, null]);
  expect(capped.stats()).toMatchObject({
    throttledRequests: 2,
    throttledCommands: 51,
    maxPerSecond: 100,
    maxOfferedPerSecond: 151,
  });
  expect(capped.stats().byPath).toEqual({ "/pipeline": 3, "/multi-exec": 1 });
});

test("auto-pipelined calls fail together when their batch does not fit in what is left of the second", async () => {
  const redis = sdk(capped.url, { enableAutoPipelining: true });
  const k = key("auto");
  const first = await Promise.all(Array.from({ length: 80 }, () => redis.incr(k)));
  expect(Math.max(...first)).toBe(80);
  const second = await Promise.allSettled(Array.from({ length: 30 }, () => redis.incr(k)));
  expect(second.every((r) => r.status === "rejected")).toBe(true);
  for (const r of second) if (r.status === "rejected") expectThrottled(r.reason);
  clock += 1000;
  expect(await redis.get<number>(k)).toBe(80);
});

test("the cap is read, set and cleared over /__standin/limits and on the server object", async () => {
  const redis = sdk(capped.url);
  const limits = `${capped.url}/__standin/limits`;
  expect(await (await fetch(limits, { headers: auth })).json()).toEqual({ commandsPerSecond: 100 });
  expect((await fetch(limits)).status).toBe(401);

  const set = await fetch(limits, { method: "POST", headers: auth, body: JSON.stringify({ commandsPerSecond: 2 }) });
  expect(set.status).toBe(200);
  expect(await set.json()).toEqual({ commandsPerSecond: 2 });
  expect(capped.limits()).toEqual({ commandsPerSecond: 2 });
  await redis.ping();
  await redis.ping();
  expectThrottled(await rejection(redis.ping()), 2);

  for (const bad of [{ commandsPerSecond: -1 }, { commandsPerSecond: 1.5 }, { commandsPerSecond: "10" }, {}]) {
    expect((await fetch(limits, { method: "POST", headers: auth, body: JSON.stringify(bad) })).status).toBe(400);
  }
  expect(
    (await fetch(limits, { method: "POST", headers: auth, body: JSON.stringify({ commandsPerSecond: null }) })).status,
  ).toBe(200);
  expect(capped.limits()).toEqual({ commandsPerSecond: null });
  await Promise.all(Array.from({ length: 300 }, () => redis.ping()));

  capped.setLimits({ commandsPerSecond: 0 }); // 0 also means no cap
  expect(capped.limits()).toEqual({ commandsPerSecond: null });
  expect(() => capped.setLimits({ commandsPerSecond: -5 })).toThrow();
  expect(capped.stats()).toMatchObject({ throttledRequests: 1, maxPerSecond: 302 });
});

test("stats report the busiest second's commands and the throttled ones, over HTTP too, and reset", async () => {
  const redis = sdk(capped.url);
  capped.setLimits({ commandsPerSecond: 10 });
  await Promise.allSettled(Array.from({ length: 4 }, () => redis.ping()));
  clock += 1000;
  await Promise.allSettled(Array.from({ length: 13 }, () => redis.ping()));
  clock += 1000;
  await redis.ping();
  const res = await fetch(`${capped.url}/__standin/stats`, { headers: auth });
  expect(await res.json()).toEqual({
    requests: 15,
    commands: 15,
    byPath: { "/": 15 },
    throttledRequests: 3,
    throttledCommands: 3,
    maxPerSecond: 10,
    syncWaits: 0,
    syncTimeouts: 0,
    maxOfferedPerSecond: 13,
  });
  capped.resetStats();
  expect(capped.stats()).toMatchObject({ requests: 0, throttledRequests: 0, maxPerSecond: 0, maxOfferedPerSecond: 0 });
  // A stats reset gives no fresh budget: the second's 1 command still counts against the cap.
  await Promise.allSettled(Array.from({ length: 10 }, () => redis.ping()));
  expect(capped.stats()).toMatchObject({ requests: 9, throttledRequests: 1, maxPerSecond: 9 });
});

test("on the real clock the cap resets at the next wall-clock second", async () => {
  const real = await startUpstashRest({
    redisHost: engine.host,
    redisPort: engine.port,
    token: TOKEN,
    maxCommandsPerSecond: 100,
  });
  try {
    const redis = sdk(real.url);
    await Bun.sleep(1000 - (Date.now() % 1000) + 20); // just after a second begins
    const p = redis.pipeline();
    for (let i = 0; i < 100; i++) p.ping();
    await p.exec();
    expectThrottled(await rejection(redis.ping()));
    await Bun.sleep(1000 - (Date.now() % 1000) + 20);
    expect(await redis.ping()).toBe("PONG");
    expect(real.stats()).toMatchObject({ commands: 101, throttledCommands: 1, maxPerSecond: 100 });
  } finally {
    await real.stop();
  }
});

/**
 * Order ids from blocks (src/redis/ids.ts, lua/id-block.lua): unique across any number of isolates
 * with no lease to hold, so isolate churn and lost replies cannot exhaust them.
 */
import { afterAll, expect, test } from "bun:test";
import { Redis } from "@upstash/redis";
import { startFaultProxy } from "../../scripts/stack/fault-proxy.ts";
import { IDS_PER_BLOCK, IdGenerator, IsolateIds } from "../../src/redis/ids.ts";
import { keys } from "../../src/redis/keys.ts";
import { luaSources } from "../../src/redis/scripts.ts";
import { reserve } from "../../src/services/seckill/reserve.ts";
import { createSeckill, userIds } from "../support/seckill.ts";
import { createTestApp, eventually, getStack } from "../support/stack.ts";

async function client(): Promise<Redis> {
  const stack = await getStack();
  return new Redis({
    url: stack.env.UPSTASH_REDIS_REST_URL as string,
    token: stack.env.UPSTASH_REDIS_REST_TOKEN as string,
    retry: false,
    enableTelemetry: false,
  });
}

async function sha1Hex(text: string): Promise<string> {
  const d = await crypto.subtle.digest("SHA-1", new TextEncoder().encode(text));
  return [...new Uint8Array(d)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** A `waitUntil` that keeps what it was given, so a test can await the background work. */
function background() {
  const pending: Promise<unknown>[] = [];
  return { waitUntil: (p: Promise<unknown>) => void pending.push(p), settle: () => Promise.all(pending.splice(0)) };
}

const proxies: { stop(): Promise<void> }[] = [];
afterAll(async () => {
  for (const p of proxies) await p.stop();
});

test("ids of one isolate are unique, increasing and carry the time they were drawn", async () => {
  const redis = await client();
  const ids = new IsolateIds(redis);
  const before = Date.now();
  const got: bigint[] = [];
  for (let i = 0; i < 2_000; i++) got.push(await ids.next());
  expect(new Set(got).size).toBe(got.length);
  for (let i = 1; i < got.length; i++) expect(got[i]! > got[i - 1]!).toBe(true);
  // Positive signed BIGINT, and the time within the test's span (the block time, to the ms).
  expect(got.every((id) => id > 0n && id < 1n << 63n)).toBe(true);
  const t = IdGenerator.timeOf(got[0]!);
  expect(t).toBeGreaterThanOrEqual(before - 5);
  expect(t).toBeLessThanOrEqual(Date.now() + 5);
  expect(ids.stats.draws).toBe(1);
});

test("isolate churn: 3,000 isolates that each issue ids and vanish never run out and never collide", async () => {
  // The earlier design leased one of 1,024 worker slots per isolate for an hour: isolate 1,025
  // failed with "no free id worker slot". Blocks are never held.
  const redis = await client();
  const all: bigint[] = [];
  const isolates = 3_000;
  for (let start = 0; start < isolates; start += 250) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(250, isolates - start) }, async () => {
        const ids = new IsolateIds(redis, Date.now, { sharesIo: false });
        return [await ids.next(), await ids.next()];
      }),
    );
    for (const pair of batch) all.push(...pair);
  }
  expect(all.length).toBe(2 * isolates);
  expect(new Set(all).size).toBe(all.length);
  // Each isolate drew exactly one block: a block is one id-block call, never more.
  expect(new Set(all.map((id) => IdGenerator.blockOf(id))).size).toBe(isolates);
});

test("a block is used up, then the next is drawn: no id repeats across blocks", async () => {
  const redis = await client();
  const ids = new IsolateIds(redis);
  const got = new Set<bigint>();
  const n = 2 * IDS_PER_BLOCK + 10;
  for (let i = 0; i < n; i++) got.add(await ids.next());
  expect(got.size).toBe(n);
  expect(ids.stats.draws).toBe(3);
});

test("the next block is drawn in the background before the current runs out: no caller waits", async () => {
  const redis = await client();
  const ids = new IsolateIds(redis);
  const bg = background();
  const got = new Set<bigint>();
  for (let i = 0; i < 3 * IDS_PER_BLOCK; i++) {
    got.add(await ids.next(bg));
    if (i % 512 === 0) await bg.settle();
  }
  expect(got.size).toBe(3 * IDS_PER_BLOCK);
  // Only the cold isolate's first id waited for a draw; the later blocks came from spares.
  expect(ids.stats.foregroundDraws).toBe(1);
  expect(ids.stats.draws).toBeGreaterThanOrEqual(3);
});

test("a block older than its age bound is not used: ids stay within a minute of their issue", async () => {
  const redis = await client();
  let now = Date.now();
  const ids = new IsolateIds(redis, () => now, { blockMaxAgeMs: 60_000 });
  const first = await ids.next();
  now += 61_000;
  const later = await ids.next();
  expect(IdGenerator.blockOf(later)).not.toBe(IdGenerator.blockOf(first));
  expect(IdGenerator.timeOf(later)).toBeGreaterThanOrEqual(now - 5);
  expect(ids.stats.draws).toBe(2);
});

test("clocks that disagree cannot make two isolates share a block (the counter only moves forward)", async () => {
  const redis = await client();
  const ahead = new IsolateIds(redis, () => Date.now() + 3_600_000);
  const behind = new IsolateIds(redis, () => Date.now() - 3_600_000);
  const a = await ahead.next();
  const b = await behind.next();
  expect(IdGenerator.blockOf(b) > IdGenerator.blockOf(a)).toBe(true);
});

test("where requests share in-flight I/O, a cold isolate's crowd joins one draw; on workerd each draws its own", async () => {
  const redis = await client();
  const shared = new IsolateIds(redis, Date.now, { sharesIo: true });
  const a = await Promise.all(Array.from({ length: 20 }, () => shared.next()));
  expect(new Set(a).size).toBe(20);
  expect(shared.stats.draws).toBe(1);

  const own = new IsolateIds(redis, Date.now, { sharesIo: false });
  const b = await Promise.all(Array.from({ length: 20 }, () => own.next()));
  expect(new Set(b).size).toBe(20);
  // No caller awaited another's draw: each of the 20 waited for its own.
  expect(own.stats.foregroundDraws).toBe(20);
  expect(own.stats.draws).toBe(20);
  expect(new Set([...a, ...b]).size).toBe(40);
});

test("lost replies: draws that ran in Redis but timed out at the client burn block numbers and hold nothing", async () => {
  const stack = await getStack();
  const proxy = startFaultProxy(stack.env.UPSTASH_REDIS_REST_URL as string);
  proxies.push(proxy);
  // The production client and its deadline (REDIS_TIMEOUT_MS), through the proxy.
  const t = await createTestApp({
    UPSTASH_REDIS_REST_URL: proxy.url,
    REDIS_TIMEOUT_MS: "150",
    BREAKER_MIN_CALLS: "1000",
  });
  const redis = await client();
  const sha = await sha1Hex(luaSources.idBlock);
  // Load the script first, so each draw below is exactly one EVALSHA (no NOSCRIPT → EVAL).
  await redis.scriptLoad(luaSources.idBlock);

  proxy.set({ kind: "replyDelay", ms: 600, match: sha });
  const counterBefore = BigInt((await redis.get<string | number>(keys.idBlock())) ?? -1);
  const lost = await Promise.allSettled(
    Array.from({ length: 30 }, () => new IsolateIds(t.deps.redis, Date.now, { sharesIo: false }).next()),
  );
  expect(lost.every((r) => r.status === "rejected")).toBe(true);
  // The work was done: every one of the 30 draws moved the counter, though no caller heard it.
  const counter = async () => BigInt((await redis.get<string | number>(keys.idBlock())) ?? -1);
  await eventually("the 30 timed-out draws are seen in Redis", async () => (await counter()) - counterBefore >= 30n);
  const counterAfter = await counter();
  expect(proxy.held).toBeGreaterThanOrEqual(1); // auto-pipelined: one or more held requests carried them

  // Healed: new isolates and the same ones draw fresh blocks above every burnt one.
  proxy.set({ kind: "pass" });
  const ids = new IsolateIds(t.deps.redis, Date.now, { sharesIo: false });
  const id = await ids.next();
  expect(IdGenerator.blockOf(id) > counterAfter).toBe(true);
  const more = await Promise.all(Array.from({ length: 100 }, () => new IsolateIds(t.deps.redis).next()));
  expect(new Set([id, ...more]).size).toBe(101);
});

/** Blocks an isolate's ids fall in: never more than the draws it made (an id outside them is someone else's). */
const blocksOf = (ids: bigint[]) => new Set(ids.map((id) => IdGenerator.blockOf(id))).size;

test("a cold isolate's crowd larger than a block: 10,000 joiners of one draw get 10,000 ids from blocks it drew", async () => {
  const redis = await client();
  // One frozen millisecond for every isolate: consecutive draws get consecutive block numbers, so
  // an id past its block's 4,096 would be an id of the next isolate's block.
  const frozen = Date.now();
  const crowd = new IsolateIds(redis, () => frozen, { sharesIo: true });
  const got = await Promise.all(Array.from({ length: 10_000 }, () => crowd.next()));
  const other = new IsolateIds(redis, () => frozen, { sharesIo: true });
  const theirs = await Promise.all(Array.from({ length: 2 * IDS_PER_BLOCK }, () => other.next()));
  expect(new Set(got).size).toBe(10_000);
  expect(blocksOf(got)).toBeLessThanOrEqual(crowd.stats.draws);
  expect(blocksOf(theirs)).toBeLessThanOrEqual(other.stats.draws);
  expect(new Set([...got, ...theirs]).size).toBe(got.length + theirs.length);
  // Joined, not one draw each: ceil(10,000 / 4,096) draws.
  expect(crowd.stats.draws).toBe(Math.ceil(10_000 / IDS_PER_BLOCK));
});

test("a cold app answering 10,000 concurrent reservations hands out 10,000 distinct order ids", async () => {
  const t = await createTestApp({
    ORDER_PAY_TIMEOUT_SECONDS: "86400",
    SECKILL_USER_LIMIT: "0",
    SECKILL_IP_LIMIT: "0",
    SOLD_OUT_MEMO_MS: "0",
  });
  try {
    const stock = 10_000;
    const { voucherId } = await createSeckill(t, { stock, buckets: 8 });
    const ids = t.deps.isolate.ids;
    expect(ids.stats.issued).toBe(0); // cold: no id drawn yet
    const res = await Promise.all(
      userIds(stock).map((userId) => reserve(t.deps, { voucherId, userId, ip: "10.0.0.1" })),
    );
    const orderIds = res.map((r) => (r.ok ? BigInt(r.orderId) : -1n));
    expect(orderIds.filter((id) => id < 0n).length).toBe(0);
    expect(new Set(orderIds).size).toBe(stock);
    expect(blocksOf(orderIds)).toBeLessThanOrEqual(ids.stats.draws);
  } finally {
    await t.settle();
  }
}, 120_000);

test("lost replies mid-crowd: joiners whose re-draw timed out fail, and no id is ever handed out twice", async () => {
  const stack = await getStack();
  const proxy = startFaultProxy(stack.env.UPSTASH_REDIS_REST_URL as string);
  proxies.push(proxy);
  const t = await createTestApp({
    UPSTASH_REDIS_REST_URL: proxy.url,
    REDIS_TIMEOUT_MS: "2000",
    BREAKER_MIN_CALLS: "100000",
  });
  const redis = await client();
  const sha = await sha1Hex(luaSources.idBlock);
  await redis.scriptLoad(luaSources.idBlock);
  const frozen = Date.now();
  const crowd = new IsolateIds(t.deps.redis, () => frozen, { sharesIo: true });

  // The first draw's reply comes late but in time; once it ran, every later draw's reply is lost
  // (held past the client's deadline: the block numbers were drawn, nobody heard them).
  proxy.set({ kind: "replyDelay", ms: 1_000, match: sha });
  const pending = Promise.allSettled(Array.from({ length: 10_000 }, () => crowd.next()));
  await eventually("the crowd's draw ran in Redis", async () => proxy.held >= 1, 10_000, 5);
  proxy.set({ kind: "replyDelay", ms: 5_000, match: sha });
  const settled = await pending;
  const got = settled.flatMap((r) => (r.status === "fulfilled" ? [r.value] : []));
  const failed = settled.filter((r) => r.status === "rejected").length;
  expect(got.length + failed).toBe(10_000);
  expect(got.length).toBeLessThanOrEqual(IDS_PER_BLOCK); // one block was heard
  expect(failed).toBeGreaterThan(0); // the rest joined a draw whose reply was lost: a timeout, not an id
  expect(new Set(got).size).toBe(got.length);
  expect(blocksOf(got)).toBeLessThanOrEqual(crowd.stats.draws);

  // Healed: the same isolate and another of the same millisecond hand out ids above every burnt block.
  proxy.set({ kind: "pass" });
  const counter = BigInt((await redis.get<string | number>(keys.idBlock())) ?? -1);
  const other = new IsolateIds(t.deps.redis, () => frozen, { sharesIo: true });
  const more = await Promise.all([
    ...Array.from({ length: 5_000 }, () => crowd.next()),
    ...Array.from({ length: 5_000 }, () => other.next()),
  ]);
  const all = [...got, ...more];
  expect(new Set(all).size).toBe(all.length);
  expect(more.every((id) => IdGenerator.blockOf(id) > counter)).toBe(true);
  expect(blocksOf(more.slice(5_000))).toBeLessThanOrEqual(other.stats.draws);
}, 60_000);

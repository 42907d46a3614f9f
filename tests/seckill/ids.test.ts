import { expect, test } from "bun:test";
import { Redis } from "@upstash/redis";
import { IdGenerator, IsolateIds, leaseWorkerId, MAX_WORKERS } from "../../src/redis/ids.ts";
import { keys } from "../../src/redis/keys.ts";
import { scriptsFor } from "../../src/redis/scripts.ts";
import { getStack } from "../support/stack.ts";

async function client(): Promise<Redis> {
  const stack = await getStack();
  return new Redis({ url: stack.env.UPSTASH_REDIS_REST_URL as string, token: stack.env.UPSTASH_REDIS_REST_TOKEN as string, retry: false, enableTelemetry: false });
}

/**
 * The same client seen through a thin counting wrapper: every command still goes to the real Redis,
 * we only count round trips. Scripts built on the wrapper (`createScript` runs with `this` = proxy)
 * send their EVALSHA/EVAL through it too.
 */
function counting(redis: Redis) {
  const calls = { set: 0, script: 0, del: 0 };
  const counted: Record<string, keyof typeof calls> = { set: "set", del: "del", evalsha: "script", eval: "script" };
  const proxy = new Proxy(redis, {
    get(target, prop, receiver) {
      const value: unknown = Reflect.get(target, prop, receiver);
      const name = typeof prop === "string" ? counted[prop] : undefined;
      if (!name || typeof value !== "function") return value;
      return (...args: unknown[]) => {
        calls[name]++;
        return value.apply(target, args);
      };
    },
  });
  const reset = () => {
    calls.set = 0;
    calls.script = 0;
    calls.del = 0;
  };
  return { redis: proxy, calls, reset };
}

/** Loads extend-lock into Redis so each CAS counted afterwards is exactly one EVALSHA (no NOSCRIPT retry). */
async function warmScripts(redis: Redis): Promise<void> {
  await scriptsFor(redis).extendLock.exec(["idgen:test:warm"], ["nobody", "1000"]);
}

/** The 10 worker bits of an id. */
const workerOf = (id: bigint) => Number((id >> 12n) & 1023n);

/** Leases a slot for the isolate and returns it (fails the test if none is held). */
async function leased(ids: IsolateIds): Promise<number> {
  const id = await ids.next();
  const n = ids.workerId;
  expect(typeof n).toBe("number");
  expect(workerOf(id)).toBe(n as number);
  return n as number;
}

/** Isolate B takes slot n after A's lease ran out in Redis (DEL stands in for the expiry). */
async function takeOver(redis: Redis, n: number): Promise<void> {
  await redis.del(keys.idWorker(n));
  expect(await redis.set(keys.idWorker(n), "isolate-B", { nx: true, ex: 60 })).toBe("OK");
}

test("ids stay unique and increasing when the clock goes backwards or a millisecond's sequence runs out", () => {
  let now = Date.UTC(2026, 10, 29, 12, 0, 0);
  const gen = new IdGenerator(7, () => now);
  const ids: bigint[] = [];
  for (let i = 0; i < 5000; i++) ids.push(gen.next()); // > 4096 in one millisecond
  now -= 10_000; // NTP steps the clock back 10 s
  for (let i = 0; i < 100; i++) ids.push(gen.next());
  now += 20_000;
  ids.push(gen.next());
  for (let i = 1; i < ids.length; i++) expect((ids[i] as bigint) > (ids[i - 1] as bigint)).toBe(true);
  expect(gen.backwardsEvents).toBe(1);
  expect(IdGenerator.timeOf(ids[ids.length - 1] as bigint)).toBe(now);
  expect((ids[ids.length - 1] as bigint) < 2n ** 63n).toBe(true);
});

test("two isolates never lease the same worker id", async () => {
  const stack = await getStack();
  const redis = new Redis({ url: stack.env.UPSTASH_REDIS_REST_URL as string, token: stack.env.UPSTASH_REDIS_REST_TOKEN as string, retry: false, enableTelemetry: false });
  const leased = await Promise.all(Array.from({ length: 40 }, (_, i) => leaseWorkerId(redis, `owner-${i}`, 60)));
  expect(new Set(leased).size).toBe(40);
  expect(leased.every((n) => n >= 0 && n < MAX_WORKERS)).toBe(true);
});

test("a renewal never takes back a worker slot another isolate holds now; the isolate moves to a free slot", async () => {
  const redis = await client();
  let t = Date.now();
  const a = new IsolateIds(redis, () => t, 60);
  const n = await leased(a);
  await takeOver(redis, n);

  // 31 s later (past half the 60 s TTL, well inside A's proof): next() issues and renews in the
  // background. By A's clock the slot is still provably its own here; in production only Redis
  // losing the key could make it someone else's this early, which the CAS then detects.
  t += 31_000;
  await a.next();
  await a.renewing;

  expect(await redis.get(keys.idWorker(n))).toBe("isolate-B");
  expect(await redis.pttl(keys.idWorker(n))).toBeLessThanOrEqual(60_000);
  expect(a.lostLeases).toBe(1);
  expect(a.workerId).not.toBe(n);
  const after = await a.next();
  expect(workerOf(after)).not.toBe(n);
  expect(workerOf(after)).toBe(a.workerId as number);
  await redis.del(keys.idWorker(n), keys.idWorker(a.workerId as number));
});

test("after a pause longer than the TTL, next() never issues under a worker id another isolate took meanwhile, and ids never collide", async () => {
  const redis = await client();
  let t = Date.now();
  const a = new IsolateIds(redis, () => t, 60);
  const n = await leased(a);
  const before = [await a.next(), await a.next()];

  t += 120_000; // A was paused for 2 min with a 60 s lease; Redis expired it and B leased slot n
  await takeOver(redis, n);
  const b = new IdGenerator(n, () => t);
  const fromB = [b.next(), b.next(), b.next()];
  const fromA = await Promise.all([a.next(), a.next(), a.next()]);
  fromB.push(b.next());

  for (const id of fromA) expect(workerOf(id)).not.toBe(n);
  expect(a.workerId).not.toBe(n);
  expect(a.lostLeases).toBe(1);
  expect(await redis.get(keys.idWorker(n))).toBe("isolate-B");
  const all = [...before, ...fromA, ...fromB];
  expect(new Set(all).size).toBe(all.length);
  await redis.del(keys.idWorker(n), keys.idWorker(a.workerId as number));
});

test("a renewal that finds its own lease intact keeps the same worker id", async () => {
  const base = await client();
  await warmScripts(base);
  const { redis, calls, reset } = counting(base);
  let t = Date.now();
  const a = new IsolateIds(redis, () => t, 60);
  const n = await leased(a);

  // Background: past half the TTL the id is issued at once and the lease renewed behind it, by the
  // owner-only script, never a plain SET.
  t += 31_000;
  reset();
  expect(workerOf(await a.next())).toBe(n);
  await a.renewing;
  expect(calls).toEqual({ set: 0, script: 1, del: 0 });
  expect(a.renewals).toBe(1);

  // Foreground: 57 s after that renewal (past its 54 s proof, within the 60 s TTL) next() waits for
  // one CAS, which finds our token and keeps the slot: no new lease, no churn.
  t += 57_000;
  expect(workerOf(await a.next())).toBe(n);
  expect(a.renewals).toBe(2);
  expect(a.leases).toBe(1);
  expect(a.lostLeases).toBe(0);
  expect(a.validUntil).toBe(t + 54_000);
  expect(calls).toEqual({ set: 0, script: 2, del: 0 });
  expect(await base.pttl(keys.idWorker(n))).toBeGreaterThan(50_000);
  await base.del(keys.idWorker(n));
});

test("concurrent next() calls during an expired lease share one renew-or-lease round trip sequence", async () => {
  const base = await client();
  await warmScripts(base);
  const { redis, calls, reset } = counting(base);
  let t = Date.now();
  const a = new IsolateIds(redis, () => t, 60);
  const n = await leased(a);

  // Expired by A's clock, slot still A's in Redis: 20 callers, one CAS, same worker id.
  t += 70_000;
  reset();
  const renewed = await Promise.all(Array.from({ length: 20 }, () => a.next()));
  expect(calls).toEqual({ set: 0, script: 1, del: 0 });
  expect(renewed.every((id) => workerOf(id) === n)).toBe(true);
  expect(new Set(renewed).size).toBe(20);

  // Expired and taken by B: 20 callers, one CAS (fails), then one lease of a fresh slot.
  t += 70_000;
  await takeOver(base, n);
  reset();
  const moved = await Promise.all(Array.from({ length: 20 }, () => a.next()));
  expect(calls.script).toBe(1);
  expect(calls.set > 0 && calls.set % 16 === 0).toBe(true); // whole probe batches of one lease
  expect(a.leases).toBe(2);
  const m = a.workerId as number;
  expect(m).not.toBe(n);
  expect(moved.every((id) => workerOf(id) === m)).toBe(true);
  expect(new Set(moved).size).toBe(20);
  // A stampede would have leaked extra slots under A's token: exactly one slot holds it.
  const token = await base.get<string>(keys.idWorker(m));
  const slots = await base.mget<(string | null)[]>(...Array.from({ length: MAX_WORKERS }, (_, i) => keys.idWorker(i)));
  expect(slots.filter((v) => v === token).length).toBe(1);
  await base.del(keys.idWorker(n), keys.idWorker(m));
});

import { expect, test } from "bun:test";
import { Redis } from "@upstash/redis";
import { IdGenerator, leaseWorkerId, MAX_WORKERS } from "../../src/redis/ids.ts";
import { getStack } from "../support/stack.ts";

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

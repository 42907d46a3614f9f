/** lua/seckill-admission.lua and lua/upload-quota.lua called directly (real Redis behind the REST stand-in). */
import { describe, expect, test } from "bun:test";
import { Redis } from "@upstash/redis";
import { createScripts } from "../../src/redis/scripts.ts";
import { getStack } from "../support/stack.ts";

async function client() {
  const stack = await getStack();
  return new Redis({
    url: stack.env.UPSTASH_REDIS_REST_URL as string,
    token: stack.env.UPSTASH_REDIS_REST_TOKEN as string,
    retry: false,
    enableTelemetry: false,
  });
}
const uniq = () => `t:{adm-test}:${crypto.randomUUID()}`;

describe("limit scripts", () => {
  test("seckill-admission grants up to the voucher cap and the total cap (a granted lease costs one unit of the total)", async () => {
    const redis = await client();
    const s = createScripts(redis);
    const [v1, v2, total] = [uniq(), uniq(), uniq()];
    const lease = (v: string, want: number) => s.seckillAdmission.exec([v, total], [String(want), "10", "15", "5000"]);
    expect(await lease(v1, 4)).toEqual([4, 6]);
    expect(await lease(v1, 100)).toEqual([6, 0]);
    expect(await lease(v1, 1)).toEqual([0, 0]);
    expect(Number(await redis.get(v1))).toBe(10);
    // Total so far: 10 tokens + 2 leases = 12 of 15; the next lease may take 15 − 12 − 1 = 2.
    expect(await lease(v2, 5)).toEqual([2, 0]);
    expect(Number(await redis.get(total))).toBe(15);
    expect(await lease(v2, 1)).toEqual([0, 0]);
    expect(Number(await redis.get(total))).toBe(15);
    expect(await redis.pttl(total)).toBeGreaterThan(0);
  });

  test("upload-quota reserves only within the cap and adds nothing when it refuses", async () => {
    const redis = await client();
    const s = createScripts(redis);
    const key = uniq();
    const take = (bytes: number) => s.uploadQuota.exec([key], [String(bytes), "100", "60"]);
    expect(await take(60)).toEqual([1, 60]);
    expect(await take(41)).toEqual([0, 60]);
    expect(await take(40)).toEqual([1, 100]);
    expect(await take(1)).toEqual([0, 100]);
    expect(Number(await redis.get(key))).toBe(100);
    expect(await redis.ttl(key)).toBeGreaterThan(0);
  });
});

import { describe, expect, test } from "bun:test";
import { Redis } from "@upstash/redis";
import { createScripts, luaSources } from "../../src/redis/scripts.ts";
import { tryLock, withLock } from "../../src/redis/lock.ts";
import { getStack } from "../support/stack.ts";

async function client() {
  const stack = await getStack();
  return new Redis({ url: stack.env.UPSTASH_REDIS_REST_URL as string, token: stack.env.UPSTASH_REDIS_REST_TOKEN as string, retry: false, enableTelemetry: false });
}
const uniq = () => `t:${crypto.randomUUID()}`;

describe("lua scripts", () => {
  test("every imported source is Lua text, not the file path Bun yields without the text loader", () => {
    for (const [name, src] of Object.entries(luaSources)) {
      expect(src, name).toContain("redis.call");
      expect(src, name).not.toMatch(/^\/.*\.lua$/);
    }
  });

  test("unlock deletes only a lock held by the same owner", async () => {
    const redis = await client();
    const s = createScripts(redis);
    const key = uniq();
    await redis.set(key, "owner-a");
    expect(await s.unlock.exec([key], ["owner-b"])).toBe(0);
    expect(await redis.get(key)).toBe("owner-a");
    expect(await s.unlock.exec([key], ["owner-a"])).toBe(1);
    expect(await redis.exists(key)).toBe(0);
  });

  test("extend-lock renews only the owner's lock", async () => {
    const redis = await client();
    const s = createScripts(redis);
    const key = uniq();
    await redis.set(key, "me", { px: 1000 });
    expect(await s.extendLock.exec([key], ["other", "60000"])).toBe(0);
    expect(await redis.pttl(key)).toBeLessThanOrEqual(1000);
    expect(await s.extendLock.exec([key], ["me", "60000"])).toBe(1);
    expect(await redis.pttl(key)).toBeGreaterThan(50_000);
  });
});

describe("token lock", () => {
  test("of 50 concurrent contenders exactly one gets the lock, and it can be taken again after release", async () => {
    const redis = await client();
    const name = uniq();
    const handles = await Promise.all(Array.from({ length: 50 }, () => tryLock(redis, name, 5000)));
    const winners = handles.filter((h) => h !== null);
    expect(winners.length).toBe(1);
    expect(await winners[0]?.release()).toBe(true);
    expect(await tryLock(redis, name, 5000)).not.toBeNull();
  });

  test("withLock skips the work while another holder has it and releases after a throw", async () => {
    const redis = await client();
    const name = uniq();
    const held = await tryLock(redis, name, 5000);
    expect(await withLock(redis, name, 5000, async () => 1)).toEqual({ ran: false });
    await held?.release();
    await expect(withLock(redis, name, 5000, async () => Promise.reject(new Error("boom")))).rejects.toThrow("boom");
    expect(await withLock(redis, name, 5000, async () => 2)).toEqual({ ran: true, value: 2 });
  });
});

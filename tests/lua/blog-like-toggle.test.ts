import { describe, expect, test } from "bun:test";
import { Redis } from "@upstash/redis";
import { keys } from "../../src/redis/keys.ts";
import { createScripts } from "../../src/redis/scripts.ts";
import { getStack } from "../support/stack.ts";

async function setup() {
  const stack = await getStack();
  const redis = new Redis({
    url: stack.env.UPSTASH_REDIS_REST_URL as string,
    token: stack.env.UPSTASH_REDIS_REST_TOKEN as string,
    retry: false,
    enableTelemetry: false,
  });
  const blogId = 1_000_000_000 + Math.floor(Math.random() * 1_000_000_000);
  const k = [keys.blogLiked(blogId), keys.blogLikedVersion(blogId)];
  const toggle = (user: number, now: number) =>
    createScripts(redis).blogLikeToggle.exec(k, [String(user), String(now)]);
  return { redis, k, toggle };
}

describe("blog-like-toggle.lua", () => {
  test("both keys share one hash tag, so the script stays valid on a clustered Redis", () => {
    const tag = (key: string) => /\{([^}]*)\}/.exec(key)?.[1];
    expect(tag(keys.blogLiked(42))).toBe("42");
    expect(tag(keys.blogLikedVersion(42))).toBe("42");
  });

  test("alternates like and unlike per user, records the like time, and returns the set's size", async () => {
    const { redis, k, toggle } = await setup();
    expect(await toggle(7, 1_700_000_000_000)).toEqual([1, 1, 1_700_000_000_000_000]);
    expect(await redis.zscore(k[0] as string, 7)).toBe(1_700_000_000_000);
    expect((await toggle(8, 1_700_000_000_001))[0]).toBe(1);
    const [delta, count] = await toggle(7, 1_700_000_000_002);
    expect([delta, count]).toEqual([-1, 1]);
    expect(await redis.zscore(k[0] as string, 7)).toBeNull();
  });

  test("versions strictly increase even when calls share a millisecond or the clock steps back", async () => {
    const { toggle } = await setup();
    const versions: number[] = [];
    for (const now of [1_800_000_000_000, 1_800_000_000_000, 1_799_999_000_000, 1_800_000_000_000])
      versions.push((await toggle(1, now))[2]);
    for (let i = 1; i < versions.length; i++) expect(versions[i] as number).toBeGreaterThan(versions[i - 1] as number);
    expect(versions[0]).toBe(1_800_000_000_000_000);
    expect(versions[1]).toBe(1_800_000_000_000_001);
    expect(Number.isSafeInteger(versions[3])).toBe(true);
  });

  test("a lost version key restarts from the clock, above every earlier version", async () => {
    const { redis, k, toggle } = await setup();
    const before = (await toggle(1, 1_800_000_000_000))[2];
    await redis.del(k[1] as string);
    expect((await toggle(2, 1_800_000_000_500))[2]).toBeGreaterThan(before);
  });
});

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
const uniq = () => `t:idem:${crypto.randomUUID()}`;

describe("lua/idempotency-claim.lua and idempotency-finish.lua", () => {
  test("new keys count against the caller's hourly quota; a key already held is read without counting", async () => {
    const redis = await client();
    const s = createScripts(redis);
    const quota = `${uniq()}:n`;
    const keysOf = Array.from({ length: 4 }, () => uniq());
    const claim = (k: string) => s.idempotencyClaim.exec([k, quota], [`r-${k}`, "5000", "3", "60000"]);
    for (const k of keysOf.slice(0, 3)) expect(await claim(k)).toEqual([1]);
    expect(await claim(keysOf[3] as string)).toEqual([2, 60000]);
    expect(await redis.get(keysOf[3] as string)).toBeNull();
    // Held keys still answer (replay / 409 / 422 paths), and are not counted.
    expect((await claim(keysOf[0] as string))[0]).toBe(0);
    expect(await redis.get(quota)).toBe(3);
    expect(await redis.pttl(quota)).toBeGreaterThan(50_000);
  });

  test("of 50 concurrent claims of a free key exactly one wins; the others read its running record and lease", async () => {
    const redis = await client();
    const s = createScripts(redis);
    const key = uniq();
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        s.idempotencyClaim.exec([key, `${key}:n`], [`r{"f":"x","t":"${i}"}`, "5000", "0", "3600000"]),
      ),
    );
    const winners = results.filter((r) => r[0] === 1);
    expect(winners.length).toBe(1);
    const held = await redis.get<string>(key);
    for (const r of results.filter((x) => x[0] === 0)) {
      expect(r[1]).toBe(held as string);
      expect(r[2]).toBeGreaterThan(0);
      expect(r[2]).toBeLessThanOrEqual(5000);
    }
  });

  test("finish stores or releases only the claim it was given, and the stored record keeps its own TTL", async () => {
    const redis = await client();
    const s = createScripts(redis);
    const key = uniq();
    expect(await s.idempotencyClaim.exec([key, `${key}:n`], ["r-mine", "5000", "0", "3600000"])).toEqual([1]);
    // Another claim's finish (its lease ran out and the key was taken by us) changes nothing.
    expect(await s.idempotencyFinish.exec([key], ["r-theirs", "d-theirs", "60"])).toBe(0);
    expect(await s.idempotencyFinish.exec([key], ["r-theirs", "", "60"])).toBe(0);
    expect(await redis.get(key)).toBe("r-mine");
    expect(await s.idempotencyFinish.exec([key], ["r-mine", "d-done", "60"])).toBe(1);
    expect(await redis.get(key)).toBe("d-done");
    expect(await redis.ttl(key)).toBeGreaterThan(50);
    // A done record is returned to later claims, never overwritten by them.
    expect(await s.idempotencyClaim.exec([key, `${key}:n`], ["r-late", "5000", "0", "3600000"])).toEqual([
      0,
      "d-done",
      expect.any(Number),
    ]);
    const released = uniq();
    await s.idempotencyClaim.exec([released, `${released}:n`], ["r-1", "5000", "0", "3600000"]);
    expect(await s.idempotencyFinish.exec([released], ["r-1", "", "60"])).toBe(1);
    expect(await redis.exists(released)).toBe(0);
  });

  test("a claim whose lease ended frees the key for the next claim", async () => {
    const redis = await client();
    const s = createScripts(redis);
    const key = uniq();
    expect(await s.idempotencyClaim.exec([key, `${key}:n`], ["r-dead", "50", "0", "3600000"])).toEqual([1]);
    const deadline = Date.now() + 5000;
    let res = await s.idempotencyClaim.exec([key, `${key}:n`], ["r-next", "5000", "0", "3600000"]);
    while (res[0] !== 1 && Date.now() < deadline) {
      await Bun.sleep(20);
      res = await s.idempotencyClaim.exec([key, `${key}:n`], ["r-next", "5000", "0", "3600000"]);
    }
    expect(res).toEqual([1]);
    expect(await s.idempotencyFinish.exec([key], ["r-dead", "d-late", "60"])).toBe(0);
    expect(await redis.get(key)).toBe("r-next");
  });
});

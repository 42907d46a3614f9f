import { describe, expect, test } from "bun:test";
import { Redis } from "@upstash/redis";
import { createScripts, luaSources } from "../../src/redis/scripts.ts";
import { tryLock, withLock } from "../../src/redis/lock.ts";
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

describe("purchase-rule logs in the seckill scripts", () => {
  // Keys of one made-up voucher under one hash tag; the layouts are those the scripts document.
  const voucherKeys = () => {
    const tag = `{t${crypto.randomUUID()}}`;
    return {
      meta: `${tag}:meta`,
      buyers: `${tag}:buyers`,
      released: `${tag}:released`,
      outbox: `${tag}:outbox`,
      due: `${tag}:due`,
      userLog: `${tag}:rl:u`,
      ipLog: `${tag}:rl:ip`,
      daily: (u: string) => `${tag}:daily:${u}`,
      fence: (o: string) => `${tag}:fence:${o}`,
      stock: `${tag}:stock:0`,
      log: (scope: string, u: string) => `${tag}:pr:${scope}:${u}`,
    };
  };
  const DAY = 86_400_000;
  const RULES = "shop:5:30,campaign:2:7";
  const reserveCall = (
    k: ReturnType<typeof voucherKeys>,
    user: string,
    orderId: string,
    now: number,
    logs: string[],
    rules = RULES,
  ) => [
    [k.meta, k.buyers, k.outbox, k.due, k.userLog, k.ipLog, k.daily(user), k.fence(orderId), ...logs, k.stock],
    [user, orderId, String(now), "0", "1000", "0", "1000", "{}", "172800", ...(rules ? [rules, String(90 * DAY)] : [])],
  ];

  test("reserve-stock: the K-th order in the window passes, the K+1-th is refused with the rule's index and writes nothing; a caller whose rules are not the meta's gets an error", async () => {
    const redis = await client();
    const s = createScripts(redis);
    const k = voucherKeys();
    const now = Date.now();
    await redis.hset(k.meta, { begin: now - DAY, end: now + 100 * DAY, dailyLimit: 0, rules: RULES });
    await redis.set(k.stock, 10);
    const logs = (u: string) => [k.log("shop", u), k.log("c", u)];
    // Campaign log already holds one order of another voucher, 7 days minus 1 ms ago.
    await redis.zadd(k.log("c", "u1"), { score: now - 7 * DAY + 1, member: "o-old" });
    const [keys1, args1] = reserveCall(k, "u1", "o1", now, logs("u1"));
    expect(await s.reserveStock.exec(keys1 as string[], args1 as string[])).toEqual([0, 1, 9]);
    // o1 was u1's 2nd campaign order in 7 days (the K-th); a 3rd at the same instant is refused by rule 2.
    // (u1 leaves the buyers set so one-order-per-user does not answer first: as if it were another voucher.)
    await redis.srem(k.buyers, "u1");
    const [keys2, args2] = reserveCall(k, "u1", "o2", now, logs("u1"));
    const before = await Promise.all([
      redis.get(k.stock),
      redis.smembers(k.buyers),
      redis.hlen(k.outbox),
      redis.zcard(k.log("shop", "u1")),
      redis.zcard(k.log("c", "u1")),
    ]);
    expect(await s.reserveStock.exec(keys2 as string[], args2 as string[])).toEqual([7, 2, 2]);
    expect(
      await Promise.all([
        redis.get(k.stock),
        redis.smembers(k.buyers),
        redis.hlen(k.outbox),
        redis.zcard(k.log("shop", "u1")),
        redis.zcard(k.log("c", "u1")),
      ]),
    ).toEqual(before);
    // 1 ms later o-old is exactly 7 days old and no longer counts.
    await redis.srem(k.buyers, "u1");
    const [keys3, args3] = reserveCall(k, "u1", "o3", now + 1, logs("u1"));
    expect((await s.reserveStock.exec(keys3 as string[], args3 as string[]))[0]).toBe(0);
    // A caller whose rules are not the meta's (none, fewer, other limits) never gets a reservation through unchecked.
    const mismatches: [string[], string][] = [
      [[], ""],
      [[k.log("shop", "u2")], "shop:5:30"],
      [logs("u2"), "shop:9:30,campaign:2:7"],
    ];
    for (const [passed, rules] of mismatches) {
      const [keys4, args4] = reserveCall(k, "u2", "o4", now, passed, rules);
      await expect(s.reserveStock.exec(keys4 as string[], args4 as string[])).rejects.toThrow("purchase rules");
    }
    expect(await redis.get(k.stock)).toBe(8);
  });

  test("release-stock-many and release-stock take each order out of its rule logs once; the block size follows the key count", async () => {
    const redis = await client();
    const s = createScripts(redis);
    const k = voucherKeys();
    await redis.set(k.stock, 0);
    for (const [u, o] of [
      ["u1", "o1"],
      ["u2", "o2"],
    ] as const) {
      await redis.sadd(k.buyers, u);
      await redis.zadd(k.log("shop", u), { score: 1, member: o }, { score: 2, member: `${o}-other` });
      await redis.zadd(k.log("c", u), { score: 1, member: o });
    }
    const head = [k.released, k.buyers, k.outbox, k.due];
    const block = (u: string) => [k.daily(u), k.stock, k.log("shop", u), k.log("c", u)];
    const many = () => s.releaseStockMany.exec([...head, ...block("u1"), ...block("u2")], ["o1", "u1", "o2", "u2"]);
    expect(await many()).toBe(2);
    expect(await many()).toBe(0);
    expect(await redis.get(k.stock)).toBe(2);
    for (const u of ["u1", "u2"]) {
      expect(await redis.zrange(k.log("shop", u), 0, -1)).toEqual([`o${u.slice(1)}-other`]);
      expect(await redis.exists(k.log("c", u))).toBe(0);
    }
    // The classic layout (no rule logs) still works, and a key list that fits no block size is refused.
    await redis.sadd(k.buyers, "u3");
    expect(await s.releaseStockMany.exec([...head, k.daily("u3"), k.stock], ["o3", "u3"])).toBe(1);
    await expect(
      s.releaseStockMany.exec([...head, k.daily("u4"), k.stock, k.log("shop", "u4")], ["o4", "u4", "o5", "u5"]),
    ).rejects.toThrow("keys do not match");
    // release-stock.lua (one order): rule logs after the bucket.
    await redis.zadd(k.log("shop", "u6"), { score: 1, member: "o6" });
    const one = () =>
      s.releaseStock.exec(
        [k.released, k.buyers, k.outbox, k.due, k.daily("u6"), k.stock, k.log("shop", "u6")],
        ["o6", "u6"],
      );
    expect(await one()).toBe(1);
    expect(await one()).toBe(0);
    expect(await redis.exists(k.log("shop", "u6"))).toBe(0);
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

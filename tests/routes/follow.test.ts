import { describe, expect, test } from "bun:test";
import type { RedisPort } from "../../src/deps.ts";
import { keys } from "../../src/redis/keys.ts";
import { call } from "../support/http.ts";
import { newShop, newUser, postBlog, setFollow } from "../support/social.ts";
import { createTestApp } from "../support/stack.ts";
import type { TestApp } from "../support/stack.ts";

async function followRows(t: TestApp, me: number, target: number): Promise<number> {
  const row = (
    await t.deps.db.execute("SELECT COUNT(*) AS n FROM tb_follow WHERE user_id = ? AND follow_user_id = ?", [
      me,
      target,
    ])
  ).rows[0] as { n: string };
  return Number(row.n);
}

const inbox = async (t: TestApp, uid: number) =>
  (await t.deps.redis.zrange<(string | number)[]>(keys.feed(uid), 0, -1)).map(Number);

/** The Redis client with chosen commands failing while `failing` holds them (a fault-injection wrapper). */
function flakyRedis(redis: RedisPort, failing: Set<string>): RedisPort {
  return new Proxy(redis, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof prop === "string" && failing.has(prop))
        return () => Promise.reject(new Error(`injected: ${prop} failed`));
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

describe("follows", () => {
  test("following is idempotent and keeps MySQL and follows:{uid} in step", async () => {
    const t = await createTestApp();
    const me = await newUser(t);
    const star = await newUser(t);
    expect((await call<boolean>(t.app, "GET", `/api/follow/or/not/${star.id}`, { token: me.token })).body).toEqual({
      success: true,
      data: false,
    });
    for (let i = 0; i < 2; i++) expect((await setFollow(t, me, star.id)).body).toEqual({ success: true });
    // Concurrent repeats too: UNIQUE(user_id, follow_user_id) + INSERT IGNORE.
    await Promise.all(Array.from({ length: 5 }, () => setFollow(t, me, star.id)));
    expect(await followRows(t, me.id, star.id)).toBe(1);
    expect((await t.deps.redis.smembers(keys.follows(me.id))).map(Number)).toEqual([star.id]);
    expect((await call<boolean>(t.app, "GET", `/api/follow/or/not/${star.id}`, { token: me.token })).body.data).toBe(
      true,
    );
    // Following is one-way.
    expect((await call<boolean>(t.app, "GET", `/api/follow/or/not/${me.id}`, { token: star.token })).body.data).toBe(
      false,
    );

    for (let i = 0; i < 2; i++) expect((await setFollow(t, me, star.id, false)).body).toEqual({ success: true });
    expect(await followRows(t, me.id, star.id)).toBe(0);
    expect(await t.deps.redis.scard(keys.follows(me.id))).toBe(0);
    expect((await call<boolean>(t.app, "GET", `/api/follow/or/not/${star.id}`, { token: me.token })).body.data).toBe(
      false,
    );
  });

  test("nobody can follow themselves, and following a missing user is NOT_FOUND; nothing is written", async () => {
    const t = await createTestApp();
    const me = await newUser(t);
    const self = await setFollow(t, me, me.id);
    expect(self.status).toBe(200);
    expect(self.body).toMatchObject({ success: false, code: "INVALID_INPUT" });
    const ghost = await setFollow(t, me, 987654321);
    expect(ghost.status).toBe(200);
    expect(ghost.body).toEqual({ success: false, code: "NOT_FOUND", errorMsg: "user not found" });
    expect(await followRows(t, me.id, me.id)).toBe(0);
    expect(await followRows(t, me.id, 987654321)).toBe(0);
    expect(await t.deps.redis.exists(keys.follows(me.id))).toBe(0);
  });

  test("unfollowing removes that author's notes from the inbox and keeps the others (classic regression)", async () => {
    const t = await createTestApp();
    const me = await newUser(t);
    const a = await newUser(t);
    const b = await newUser(t);
    const shopId = await newShop(t);
    await setFollow(t, me, a.id);
    await setFollow(t, me, b.id);
    const fromA = [await postBlog(t, a, shopId), await postBlog(t, a, shopId)];
    const fromB = [await postBlog(t, b, shopId)];
    expect((await inbox(t, me.id)).sort()).toEqual([...fromA, ...fromB].sort());

    await setFollow(t, me, a.id, false);
    expect(await inbox(t, me.id)).toEqual(fromB);
    const feed = await call<{ list: { id: number }[] }>(t.app, "GET", "/api/blog/of/follow", { token: me.token });
    expect(feed.body.data?.list.map((x) => x.id)).toEqual(fromB);
    // New notes of the unfollowed author no longer arrive.
    await postBlog(t, a, shopId);
    expect(await inbox(t, me.id)).toEqual(fromB);
  });

  test("following copies the author's existing notes into the inbox", async () => {
    const t = await createTestApp();
    const me = await newUser(t);
    const a = await newUser(t);
    const shopId = await newShop(t);
    const earlier = [await postBlog(t, a, shopId), await postBlog(t, a, shopId)];
    await setFollow(t, me, a.id);
    expect((await inbox(t, me.id)).sort()).toEqual(earlier.sort());
    const feed = await call<{ list: { id: number }[] }>(t.app, "GET", "/api/blog/of/follow", { token: me.token });
    expect(feed.body.data?.list.map((x) => x.id).sort()).toEqual(earlier.sort());
  });

  test("common follows are the users both follow (SINTER), as user cards", async () => {
    const t = await createTestApp();
    const [me, you, x, y, z] = await Promise.all(Array.from({ length: 5 }, () => newUser(t)));
    if (!me || !you || !x || !y || !z) throw new Error("users");
    for (const target of [x, y]) await setFollow(t, me, target.id);
    for (const target of [y, z, x]) await setFollow(t, you, target.id);
    const res = await call<{ id: number; nickName: string; icon: string }[]>(
      t.app,
      "GET",
      `/api/follow/common/${you.id}`,
      { token: me.token },
    );
    expect(res.body.data?.map((u) => u.id)).toEqual([x.id, y.id].sort((p, q) => p - q));
    expect(Object.keys(res.body.data?.[0] ?? {}).sort()).toEqual(["icon", "id", "nickName"]);
    expect((await call(t.app, "GET", `/api/follow/common/${z.id}`, { token: me.token })).body).toEqual({
      success: true,
      data: [],
    });
  });

  test("when Redis fails after MySQL saved the follow, the caller gets an error and a retry converges both stores", async () => {
    const failing = new Set<string>();
    const t = await createTestApp({}, { wrap: (deps) => ({ ...deps, redis: flakyRedis(deps.redis, failing) }) });
    const me = await newUser(t);
    const star = await newUser(t);
    const shopId = await newShop(t);
    const note = await postBlog(t, star, shopId);

    failing.add("sadd");
    const first = await setFollow(t, me, star.id);
    expect(first.status).toBe(503);
    expect(first.body).toMatchObject({ success: false, code: "UNAVAILABLE" });
    expect(await followRows(t, me.id, star.id)).toBe(1);
    failing.clear();
    expect((await setFollow(t, me, star.id)).body.success).toBe(true);
    expect(await followRows(t, me.id, star.id)).toBe(1);
    expect(await t.deps.redis.sismember(keys.follows(me.id), star.id)).toBe(1);
    expect(await inbox(t, me.id)).toEqual([note]);

    failing.add("zrem");
    expect((await setFollow(t, me, star.id, false)).status).toBe(503);
    expect(await followRows(t, me.id, star.id)).toBe(0);
    // Until the retry, the stale inbox entry is not shown: reads check follows in MySQL.
    const meanwhile = await call<{ list: unknown[] }>(t.app, "GET", "/api/blog/of/follow", { token: me.token });
    expect(meanwhile.body.data?.list).toEqual([]);
    failing.clear();
    expect((await setFollow(t, me, star.id, false)).body.success).toBe(true);
    expect(await t.deps.redis.sismember(keys.follows(me.id), star.id)).toBe(0);
    expect(await inbox(t, me.id)).toEqual([]);
  });

  test("follow routes need a login, and malformed input is a 400 envelope", async () => {
    const t = await createTestApp();
    expect((await call(t.app, "PUT", "/api/follow/1/true")).status).toBe(401);
    expect((await call(t.app, "GET", "/api/follow/or/not/1")).status).toBe(401);
    expect((await call(t.app, "GET", "/api/follow/common/1")).status).toBe(401);
    const me = await newUser(t);
    for (const [method, path] of [
      ["PUT", "/api/follow/abc/true"],
      ["PUT", "/api/follow/0/true"],
      ["PUT", "/api/follow/5/yes"],
      ["PUT", "/api/follow/5/TRUE"],
      ["GET", "/api/follow/or/not/x"],
      ["GET", "/api/follow/or/not/-3"],
      ["GET", "/api/follow/common/1.5"],
      ["GET", "/api/follow/common/99999999999999999999"],
    ] as const) {
      const res = await call(t.app, method, path, { token: me.token });
      expect(res.status, `${method} ${path}`).toBe(400);
      expect(res.body).toMatchObject({ success: false, code: "INVALID_INPUT" });
    }
  });
});

describe("like and follow toggles are metered per user (issue 16 item 9)", () => {
  test("a burst of toggles past the bucket is 429 with Retry-After; likes and follows share it; other users are unaffected", async () => {
    const t = await createTestApp({
      TOGGLE_BUCKET_SIZE: "6",
      TOGGLE_BUCKET_REFILL: "1",
      TOGGLE_BUCKET_INTERVAL_MS: "60000",
    });
    const [me, other, target] = [await newUser(t), await newUser(t), await newUser(t)];
    const blogId = await postBlog(t, target, await newShop(t));
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++)
      statuses.push((await call(t.app, "PUT", `/api/blog/like/${blogId}`, { token: me.token })).status);
    for (let i = 0; i < 4; i++)
      statuses.push((await call(t.app, "PUT", `/api/follow/${target.id}/${i % 2 === 0}`, { token: me.token })).status);
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 429, 429]);
    const refused = await call(t.app, "PUT", `/api/blog/like/${blogId}`, { token: me.token });
    expect(refused.status).toBe(429);
    expect(refused.body.code).toBe("RATE_LIMITED");
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    // Refused toggles wrote nothing: 4 likes (back to not liked), 2 follows (followed, unfollowed).
    expect(await t.deps.redis.zscore(keys.blogLiked(blogId), me.id)).toBeNull();
    expect(await followRows(t, me.id, target.id)).toBe(0);
    expect((await call(t.app, "PUT", `/api/blog/like/${blogId}`, { token: other.token })).status).toBe(200);
  });
});

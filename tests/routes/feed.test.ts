import { describe, expect, test } from "bun:test";
import { keys } from "../../src/redis/keys.ts";
import { advanceCursor } from "../../src/services/feed.ts";
import { call } from "../support/http.ts";
import { manualClock, newShop, newUser, postBlog, setFollow, type TestUser } from "../support/social.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";

type Page = { list: { id: number; userId: number; name: string; isLike: boolean }[]; minTime: number; offset: number };

/** Scrolls the whole feed the way the classic client does (lastId/offset omitted at first), page by page. */
async function scrollAll(t: TestApp, user: TestUser, maxPages = 50): Promise<{ ids: number[]; pages: number[][] }> {
  const pages: number[][] = [];
  let query = "";
  for (let i = 0; i < maxPages; i++) {
    const res = await call<Page>(t.app, "GET", `/api/blog/of/follow${query}`, { token: user.token });
    expect(res.body.success).toBe(true);
    const page = res.body.data as Page;
    if (page.list.length === 0) break;
    pages.push(page.list.map((b) => b.id));
    // Classic client: offset=0 is omitted.
    query = `?lastId=${page.minTime}${page.offset ? `&offset=${page.offset}` : ""}`;
  }
  return { ids: pages.flat(), pages };
}

describe("feed cursor", () => {
  test("offset counts the run of equal scores across pages, not only within the last page", () => {
    // Page 1 from the top: 9, 7, 7 → minTime 7, two items at 7 seen.
    expect(advanceCursor({ minTime: Number.MAX_SAFE_INTEGER, offset: 0 }, [9, 7, 7])).toEqual({
      minTime: 7,
      offset: 2,
    });
    // Page 2 (from 7 skipping 2): 7, 7, 7 — the run continues: 2 + 3.
    expect(advanceCursor({ minTime: 7, offset: 2 }, [7, 7, 7])).toEqual({ minTime: 7, offset: 5 });
    // Page 3: 7, 5, 5 — a new minimum: only its own run counts.
    expect(advanceCursor({ minTime: 7, offset: 5 }, [7, 5, 5])).toEqual({ minTime: 5, offset: 2 });
    // Nothing read: the cursor stays.
    expect(advanceCursor({ minTime: 5, offset: 2 }, [])).toEqual({ minTime: 5, offset: 2 });
  });
});

describe("follow feed", () => {
  test("a new note lands in every follower's inbox with its time as the score, trimmed to the newest FEED_MAX_LENGTH", async () => {
    const clock = manualClock();
    const t = await createTestApp({ FEED_MAX_LENGTH: "3" }, { clock });
    const author = await newUser(t);
    const fans = [await newUser(t), await newUser(t)];
    const outsider = await newUser(t);
    for (const f of fans) await setFollow(t, f, author.id);
    const shopId = await newShop(t);
    const ids: number[] = [];
    for (let i = 0; i < 5; i++) {
      clock.ms += 1000;
      ids.push(await postBlog(t, author, shopId));
    }
    for (const f of fans) {
      const inbox = await t.deps.redis.zrange<(string | number)[]>(keys.feed(f.id), 0, -1, { withScores: true });
      expect(inbox.map(Number)).toEqual(ids.slice(2).flatMap((id, i) => [id, clock.ms - (2 - i) * 1000]));
    }
    expect(await t.deps.redis.exists(keys.feed(outsider.id), keys.feed(author.id))).toBe(0);
  });

  test("scroll pages are newest first and carry the author, the cursor and isLike", async () => {
    const clock = manualClock();
    const t = await createTestApp({}, { clock });
    const me = await newUser(t);
    const author = await newUser(t);
    await setFollow(t, me, author.id);
    const shopId = await newShop(t);
    const ids: number[] = [];
    for (let i = 0; i < 3; i++) {
      clock.ms += 10;
      ids.push(await postBlog(t, author, shopId));
    }
    await call(t.app, "PUT", `/api/blog/like/${ids[2]}`, { token: me.token });
    const first = await call<Page>(t.app, "GET", `/api/blog/of/follow?lastId=${clock.ms + 1}`, { token: me.token });
    expect(first.body.data?.list.map((b) => b.id)).toEqual(ids.slice(1).reverse());
    expect(first.body.data?.list.map((b) => b.isLike)).toEqual([true, false]);
    expect(first.body.data?.list[0]).toMatchObject({ userId: author.id });
    expect(first.body.data?.list[0]?.name).toMatch(/^user_/);
    expect(first.body.data).toMatchObject({ minTime: clock.ms - 10, offset: 1 });
    const second = await call<Page>(t.app, "GET", `/api/blog/of/follow?lastId=${clock.ms - 10}&offset=1`, {
      token: me.token,
    });
    expect(second.body.data).toMatchObject({ minTime: clock.ms - 20, offset: 1 });
    expect(second.body.data?.list.map((b) => b.id)).toEqual(ids.slice(0, 1));
    // Past the end: an empty list, the cursor unchanged.
    const end = await call<Page>(t.app, "GET", `/api/blog/of/follow?lastId=${clock.ms - 20}&offset=1`, {
      token: me.token,
    });
    expect(end.body.data).toEqual({ list: [], minTime: clock.ms - 20, offset: 1 });
  });

  for (const pageSize of [2, 3]) {
    test(`with 7 notes sharing one timestamp and page size ${pageSize}, no note is skipped or repeated, and the order is stable (classic regression)`, async () => {
      const clock = manualClock();
      const t = await createTestApp({ FEED_PAGE_SIZE: String(pageSize) }, { clock });
      const me = await newUser(t);
      const a = await newUser(t);
      const b = await newUser(t);
      await setFollow(t, me, a.id);
      await setFollow(t, me, b.id);
      const shopId = await newShop(t);
      // Two older notes, 7 at the same millisecond (from two authors), two newer ones.
      const older = [await postBlog(t, a, shopId), await postBlog(t, b, shopId)];
      clock.ms += 5;
      const tied: number[] = [];
      for (let i = 0; i < 7; i++) tied.push(await postBlog(t, i % 2 ? a : b, shopId));
      clock.ms += 5;
      const newer = [await postBlog(t, a, shopId), await postBlog(t, b, shopId)];
      const all = [...older, ...tied, ...newer];

      const { ids, pages } = await scrollAll(t, me);
      expect(new Set(ids).size).toBe(ids.length);
      expect([...ids].sort((x, y) => x - y)).toEqual([...all].sort((x, y) => x - y));
      expect(pages.every((p) => p.length === pageSize || p === pages[pages.length - 1])).toBe(true);
      // Newest first by score; inside the tie the order is whatever Redis gives, but the same on every scroll.
      expect(ids.slice(0, 2).sort()).toEqual([...newer].sort());
      expect(ids.slice(2, 9).sort()).toEqual([...tied].sort());
      expect(ids.slice(9).sort()).toEqual([...older].sort());
      expect((await scrollAll(t, me)).ids).toEqual(ids);
      expect(ids).toEqual(
        (await t.deps.redis.zrange<(string | number)[]>(keys.feed(me.id), 0, -1, { rev: true })).map(Number),
      );
    });
  }

  test("inbox entries whose author is no longer followed are skipped and the page is refilled from further down", async () => {
    const clock = manualClock();
    const t = await createTestApp({}, { clock });
    const me = await newUser(t);
    const a = await newUser(t);
    const stranger = await newUser(t);
    await setFollow(t, me, a.id);
    const shopId = await newShop(t);
    clock.ms += 10;
    const keep1 = await postBlog(t, a, shopId);
    clock.ms += 10;
    const keep2 = await postBlog(t, a, shopId);
    // Entries a racing push could leave behind: a stranger's notes, and a note that no longer exists.
    clock.ms += 10;
    const foreign = [await postBlog(t, stranger, shopId), await postBlog(t, stranger, shopId)];
    for (const id of [...foreign, 987654321])
      await t.deps.redis.zadd(keys.feed(me.id), { score: clock.ms, member: String(id) });
    const { ids } = await scrollAll(t, me);
    expect(ids).toEqual([keep2, keep1]);
  });

  test("an empty feed answers an empty list, and the feed needs no parameters", async () => {
    const t = await createTestApp();
    const me = await newUser(t);
    const res = await call<Page>(t.app, "GET", "/api/blog/of/follow", { token: me.token });
    expect(res.body).toEqual({ success: true, data: { list: [], minTime: Number.MAX_SAFE_INTEGER, offset: 0 } });
  });
});

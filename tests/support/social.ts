/** Helpers for the notes / follows / feed tests: users, shops and notes through the real routes. */
import { call, loginAs } from "./http.ts";
import { createShop, createShopType } from "./fixtures.ts";
import type { TestApp } from "./stack.ts";

export interface TestUser {
  id: number;
  token: string;
}

export async function newUser(t: TestApp): Promise<TestUser> {
  const { token } = await loginAs(t.app, t.deps);
  const me = await call<{ id: number }>(t.app, "GET", "/api/user/me", { token });
  if (!me.body.data) throw new Error(`me failed: ${JSON.stringify(me.body)}`);
  return { id: me.body.data.id, token };
}

export async function newShop(t: TestApp): Promise<number> {
  return await createShop(t, await createShopType(t));
}

export async function postBlog(
  t: TestApp,
  author: TestUser,
  shopId: number,
  title = `note-${crypto.randomUUID().slice(0, 8)}`,
): Promise<number> {
  const res = await call<number>(t.app, "POST", "/api/blog", {
    token: author.token,
    json: { shopId, title, content: `content of ${title}`, images: "/imgs/blogs/1/2/a.jpg" },
  });
  if (!res.body.success || typeof res.body.data !== "number")
    throw new Error(`post failed: ${JSON.stringify(res.body)}`);
  // The push into the followers' inboxes runs in the background.
  await t.settle();
  return res.body.data;
}

/** Follows or unfollows through the route, then waits for the background work it started (the inbox backfill). */
export async function setFollow(t: TestApp, who: TestUser, target: number, on = true) {
  const res = await call(t.app, "PUT", `/api/follow/${target}/${on}`, { token: who.token });
  await t.settle();
  return res;
}

/** A clock tests can move: `now` is epoch ms. */
export function manualClock(start = Date.now()) {
  const clock = { ms: start, now: () => clock.ms };
  return clock;
}

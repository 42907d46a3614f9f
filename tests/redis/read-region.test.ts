/**
 * Reads from a read region (a replica redis-server behind its own stand-in, attached to this
 * process's stack): someone who reads back what they just wrote sees it even while replication
 * lags — the replication link is held, so the replica really is behind and still serving — and
 * the families that decide (a seckill attempt's stock, buyers, scripts) never reach the region.
 * Each test first shows the lag is real: an isolate without the writer's sync token reads stale.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ReadRegion, startReadRegion } from "../../scripts/stack/read-region.ts";
import { Redis } from "@upstash/redis";
import { keys } from "../../src/redis/keys.ts";
import { call } from "../support/http.ts";
import { createShop, createShopType, operator } from "../support/fixtures.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { newShop, newUser, postBlog, setFollow } from "../support/social.ts";
import { createTestApp, eventually, getStack } from "../support/stack.ts";

let region: ReadRegion;
let dir: string;
let env: Record<string, string>;

beforeAll(async () => {
  const stack = await getStack();
  dir = mkdtempSync(join(tmpdir(), "cityhub-test-region-"));
  region = await startReadRegion({
    primary: stack.redis,
    dir,
    token: stack.env.UPSTASH_REDIS_REST_TOKEN as string,
    primaryRest: true,
    maxWaitMs: 15_000,
  });
  env = region.env;
}, 60_000);

afterAll(async () => {
  region.link.release();
  await region.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The region read directly, without any sync token: what an isolate that never wrote would see. */
function tokenless(): Redis {
  return new Redis({
    url: env.UPSTASH_REDIS_READ_URL as string,
    token: env.UPSTASH_REDIS_READ_TOKEN as string,
    readYourWrites: false,
    enableTelemetry: false,
  });
}

/**
 * Runs `read` while the replication link is held, and checks it waited at the region for the
 * sync token before the link was released; returns what it read.
 */
async function readWhileLagging<T>(read: () => Promise<T>): Promise<T> {
  const waitsBefore = region.rest.stats().syncWaits;
  const pending = read();
  await eventually(
    "the read waits at the region for its sync token",
    async () => {
      return region.rest.stats().syncWaits > waitsBefore;
    },
    30_000,
  );
  region.link.release();
  return await pending;
}

describe("read region", () => {
  test("an operator reads back the shop they just edited while the replica lags (other isolates may read it stale)", async () => {
    const t = await createTestApp(env);
    const id = await createShop(t, await createShopType(t));
    expect((await call<{ name: string }>(t.app, "GET", `/api/shop/${id}`)).body.data?.name).toStartWith("shop-");
    await region.caughtUp();
    // Another isolate (no sync token of the writer's) holds the old name in its memory.
    const other = await createTestApp(env);
    const before = (await call<{ name: string }>(other.app, "GET", `/api/shop/${id}`)).body.data?.name;

    region.link.hold();
    try {
      const edit = await call(t.app, "PUT", "/api/shop", { token: operator(t), json: { id, name: "renamed" } });
      expect(edit.body.success).toBe(true);
      await t.settle();
      // The lag is real: a fresh isolate reading the region without a token still sees the old entry.
      const stale = await createTestApp(env);
      expect((await call<{ name: string }>(stale.app, "GET", `/api/shop/${id}`)).body.data?.name).toBe(before);
      // The editing isolate answers from its own memory (the edit wrote it through), region or not.
      const mine = await call<{ name: string }>(t.app, "GET", `/api/shop/${id}`);
      expect(mine.body.data?.name).toBe("renamed");
    } finally {
      region.link.release();
    }
  }, 30_000);

  test("a like, then the note: the reader sees their like while the replica lags", async () => {
    const t = await createTestApp(env);
    const author = await newUser(t);
    const reader = await newUser(t);
    const blogId = await postBlog(t, author, await newShop(t));
    await t.settle();
    await region.caughtUp();
    region.link.hold();
    try {
      expect((await call(t.app, "PUT", `/api/blog/like/${blogId}`, { token: reader.token })).body.success).toBe(true);
      expect(await tokenless().zscore(keys.blogLiked(blogId), reader.id)).toBeNull();
      const mine = await readWhileLagging(() =>
        call<{ isLike: boolean }>(t.app, "GET", `/api/blog/${blogId}`, { token: reader.token }),
      );
      expect(mine.body.data?.isLike).toBe(true);
    } finally {
      region.link.release();
    }
  }, 30_000);

  test("a follow, then the feed: the follower sees the author's notes while the replica lags", async () => {
    const t = await createTestApp(env);
    const author = await newUser(t);
    const follower = await newUser(t);
    const blogId = await postBlog(t, author, await newShop(t));
    await t.settle();
    await region.caughtUp();
    const page = `/api/blog/of/follow?lastId=${Date.now() + 3_600_000}`;
    region.link.hold();
    try {
      expect((await setFollow(t, follower, author.id)).body.success).toBe(true);
      await t.settle(); // the backfill into the follower's inbox
      expect((await tokenless().zrange<string[]>(keys.feed(follower.id), 0, -1)).map(Number)).not.toContain(blogId);
      const mine = await readWhileLagging(() =>
        call<{ list: { id: number }[] }>(t.app, "GET", page, { token: follower.token }),
      );
      expect(mine.body.data?.list.map((b) => b.id)).toContain(blogId);
    } finally {
      region.link.release();
    }
  }, 30_000);

  test("a seckill attempt never reaches the read region (stock, buyers and scripts stay on the primary)", async () => {
    const t = await createTestApp(env);
    const { voucherId } = await createSeckill(t, { stock: 5 });
    const [warm, buyer] = (await sessionsFor(t, userIds(2))) as [string, string];
    // The first attempt fills the voucher's cache entries (which may be read at the region).
    expect((await call(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: warm })).body.success).toBe(
      true,
    );
    await t.settle();
    region.rest.resetStats();
    const primaryBefore = region.primaryRest?.stats().commands ?? 0;
    const res = await call(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: buyer });
    expect(res.body.success).toBe(true);
    await t.settle();
    expect(region.primaryRest?.stats().commands ?? 0).toBeGreaterThan(primaryBefore);
    expect(region.rest.stats().requests).toBe(0);
  }, 30_000);
});

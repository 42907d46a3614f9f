/**
 * Trip budgets: each hot operation, run against an in-process app on the real stack with fresh
 * users and ids, may make at most its budget of SEQUENTIAL dependency trips on its critical path.
 *
 * Counted at the ports, not by timing: every guarded call (one HTTP request to Redis, PlanetScale,
 * QStash, SMS or payments) records itself in the request's trips (src/util/trips.ts), which the
 * response reports in `Server-Timing`. Sequential trips = the longest chain of calls in which each
 * call started after the previous one had answered (a call's depth is 1 + the deepest call already
 * answered when it started; calls made together — Promise.all, one pipeline — share a depth). Calls
 * still in flight when the response is written (waitUntil work) are not on the critical path and
 * are not counted. With the dependencies at a distance, latency ≈ sequential trips × RTT.
 *
 * Budgets are today's measured values (a regression fails); where the design target of the trip
 * work differs it is noted beside the budget. Each operation runs once to warm the isolate (script
 * loading, session cache), then REPS times with fresh data; the largest count is held.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { insertShop } from "../../src/services/shops.ts";
import { addShopToGeo } from "../../src/services/shop-geo.ts";
import type { DevSms } from "../../src/sms/index.ts";
import { createShopType, HANGZHOU, east } from "../support/fixtures.ts";
import { call, uniquePhone } from "../support/http.ts";
import { createSeckill } from "../support/seckill.ts";
import { newShop, newUser, postBlog, setFollow, type TestUser } from "../support/social.ts";
import { eventually, type ServedApp, serveTestApp } from "../support/stack.ts";

const REPS = 2;

interface Trips {
  /** Sequential trips on the critical path. */
  sequential: number;
  redisTrips: number;
  redisCommands: number;
  dbTrips: number;
  qstashTrips: number;
}

/** Reads the counts back from a response's Server-Timing header. */
function tripsOf(headers: Headers): Trips {
  const h = headers.get("server-timing");
  if (h === null) throw new Error("response without Server-Timing");
  const metric = (name: string) => new RegExp(`(?:^|, )${name};desc="([^"]*)"`).exec(h)?.[1] ?? "";
  const num = (s: string, unit: RegExp) => Number(unit.exec(s)?.[1] ?? 0);
  const redis = metric("redis");
  const redisTrips = num(redis, /(\d+) trips?/);
  return {
    sequential: num(metric("trips"), /(\d+) in sequence/),
    redisTrips,
    redisCommands: redis.includes("command") ? num(redis, /(\d+) commands/) : redisTrips,
    dbTrips: num(metric("db"), /(\d+) trips?/),
    qstashTrips: num(metric("qstash"), /(\d+) trips?/),
  };
}

interface Budget {
  /** Held: today's measured sequential trips. */
  budget: number;
  /** The design target (critical path), when it differs from the budget. */
  target?: number;
  /**
   * Sets up one fresh instance and returns the measured request's response (status checked by
   * `ok`). Everything before the returned call is setup and not counted.
   */
  run: () => Promise<{ status: number; headers: Headers; body: { success: boolean } }>;
  /** Does the answer say the operation did what it is meant to (so the count is of the real work)? */
  ok?: (body: { success: boolean; code?: string; data?: unknown }) => boolean;
}

const ENV = {
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  LOCAL_PAYMENT_DELAY_MS: "0",
  // Production's admission lease (createTestApp turns it off by default): part of an attempt's trips.
  SECKILL_ADMISSION_PER_SECOND: "",
};

let t: ServedApp;
const measured = new Map<string, Trips[]>();

beforeAll(async () => {
  t = await serveTestApp(ENV);
}, 120_000);

afterAll(async () => {
  await t.settle();
  await t.stop();
  const rows = [...measured].map(([name, runs]) => {
    const max = (f: (x: Trips) => number) => Math.max(...runs.map(f));
    return `${name.padEnd(40)} ${String(max((x) => x.sequential)).padStart(4)} ${String(max((x) => x.redisTrips)).padStart(6)} ${String(max((x) => x.redisCommands)).padStart(6)} ${String(max((x) => x.dbTrips)).padStart(4)} ${String(max((x) => x.qstashTrips)).padStart(7)}`;
  });
  console.log(
    `\n${"operation".padEnd(40)} ${"seq".padStart(4)} ${"redis".padStart(6)} ${"cmds".padStart(6)} ${"db".padStart(4)} ${"qstash".padStart(7)}\n${rows.join("\n")}`,
  );
});

const token = (u: { token: string }) => u.token;

async function orderOf(
  voucherId: number,
  buyer: TestUser,
): Promise<{ status: number; headers: Headers; body: { success: boolean; data?: unknown } }> {
  return await call<string>(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: token(buyer) });
}

async function orderWritten(id: string): Promise<void> {
  await eventually("order written", async () => {
    const rows = (await t.deps.db.execute("SELECT status FROM tb_voucher_order WHERE id = ?", [BigInt(id)])).rows;
    return rows.length > 0;
  });
}

const OPERATIONS: Record<string, Budget> = {
  "send a code": {
    budget: 4,
    target: 1,
    run: () => call(t.app, "POST", `/api/user/code?phone=${uniquePhone()}`, { ip: `10.9.${rand()}.${rand()}` }),
  },
  "login, existing user": {
    // Was 5 (code check, consume, INSERT IGNORE, SELECT): the user's SELECT now runs beside the consume.
    budget: 3,
    target: 2,
    run: async () => {
      const phone = uniquePhone();
      await t.deps.db.execute("INSERT INTO tb_user (phone, nick_name) VALUES (?, ?)", [phone, `user_${rand()}`]);
      await call(t.app, "POST", `/api/user/code?phone=${phone}`, { ip: `10.8.${rand()}.${rand()}` });
      const code = (t.deps.sms as DevSms).lastCode(phone);
      return await call(t.app, "POST", "/api/user/login", { json: { phone, code } });
    },
  },
  "shop read, cold (L1 and Redis miss)": {
    budget: 3,
    target: 2,
    run: async () => call(t.app, "GET", `/api/shop/${await coldShop(await createShopType(t))}`),
  },
  "vouchers of a shop, first read": {
    budget: 3,
    target: 2,
    run: async () => {
      const { shopId } = await createSeckill(t, { stock: 10 });
      // Creating it filled the cache: forgotten here (L1 and Redis), as if never read.
      await t.deps.isolate.caches.vouchers.delete(t.deps, shopId);
      return await call(t.app, "GET", `/api/voucher/list/${shopId}`);
    },
  },
  "nearby (type + x,y, Redis cold)": {
    budget: 4,
    target: 2,
    run: async () => {
      const typeId = await createShopType(t);
      for (let i = 1; i <= 5; i++) {
        const at = east(HANGZHOU, 100 * i);
        const id = await coldShop(typeId, at);
        await addShopToGeo(t.deps.redis, { id, typeId, ...at });
      }
      return await call(t.app, "GET", `/api/shop/of/type?typeId=${typeId}&current=1&x=${HANGZHOU.x}&y=${HANGZHOU.y}`);
    },
    ok: (b) => b.success && Array.isArray(b.data) && b.data.length === 5,
  },
  "seckill attempt while stock lasts": {
    budget: 2,
    target: 1,
    run: async () => {
      const { voucherId } = await createSeckill(t, { stock: 10 });
      return await orderOf(voucherId, await newUser(t));
    },
    ok: (b) => b.success && typeof b.data === "string",
  },
  "sold-out attempt": {
    budget: 0,
    run: async () => {
      const { voucherId } = await createSeckill(t, { stock: 1 });
      await orderOf(voucherId, await newUser(t));
      // The first refusal learns the sale is over; the measured one is answered from it.
      await orderOf(voucherId, await newUser(t));
      return await orderOf(voucherId, await newUser(t));
    },
    ok: (b) => !b.success && b.code === "SOLD_OUT",
  },
  "already-holding attempt": {
    budget: 0,
    run: async () => {
      const { voucherId } = await createSeckill(t, { stock: 5 });
      const buyer = await newUser(t);
      await orderOf(voucherId, buyer);
      return await orderOf(voucherId, buyer);
    },
    ok: (b) => !b.success && b.code === "DUPLICATE_ORDER",
  },
  "L1 shop read": {
    budget: 0,
    run: async () => {
      const id = await newShop(t);
      await call(t.app, "GET", `/api/shop/${id}`);
      return await call(t.app, "GET", `/api/shop/${id}`);
    },
  },
  "/me (warm session)": {
    budget: 0,
    run: async () => call(t.app, "GET", "/api/user/me", { token: token(await newUser(t)) }),
  },
  "pay (as the client sees it)": {
    budget: 3,
    target: 2,
    run: async () => {
      const { voucherId } = await createSeckill(t, { stock: 5 });
      const buyer = await newUser(t);
      const id = (await orderOf(voucherId, buyer)).body.data as string;
      await orderWritten(id);
      return await call(t.app, "POST", `/api/voucher-order/${id}/pay`, { token: token(buyer) });
    },
  },
  "order lookup": {
    budget: 1,
    run: async () => {
      const { voucherId } = await createSeckill(t, { stock: 5 });
      const buyer = await newUser(t);
      const id = (await orderOf(voucherId, buyer)).body.data as string;
      await orderWritten(id);
      return await call(t.app, "GET", `/api/voucher-order/${id}`, { token: token(buyer) });
    },
  },
  like: {
    // Was 4 (limiter, note SELECT, toggle, column UPDATE): the SELECT runs beside the toggle and the
    // column is written in the background. The limiter's own trip remains (docs/decisions/trips.md).
    budget: 2,
    target: 1,
    run: async () => {
      const blogId = await postBlog(t, await newUser(t), await newShop(t));
      return await call(t.app, "PUT", `/api/blog/like/${blogId}`, { token: token(await newUser(t)) });
    },
  },
  follow: {
    // Was 5 (limiter, existence SELECT, INSERT, SADD, backfill): the INSERT selects the target
    // (its own existence check) beside the SADD; the backfill runs in the background.
    budget: 2,
    run: async () => {
      const [who, target] = [await newUser(t), await newUser(t)];
      return await setFollow(t, who, target.id);
    },
  },
  "publish a note (20 followers)": {
    // Was 5 (limiter, shop SELECT, INSERT, followers, push): the INSERT selects the shop; the
    // fan-out runs in the background.
    budget: 2,
    run: async () => {
      const author = await newUser(t);
      for (let i = 0; i < 20; i++) await setFollow(t, await newUser(t), author.id);
      const shopId = await newShop(t);
      return await call(t.app, "POST", "/api/blog", {
        token: token(author),
        json: { shopId, title: `n-${rand()}`, content: "trip budget", images: "/imgs/blogs/1/2/a.jpg" },
      });
    },
  },
  "feed page": {
    // Was 3 (inbox, notes, likes): the likes lookup runs beside the notes' SELECT.
    budget: 2,
    run: async () => {
      const [reader, author] = [await newUser(t), await newUser(t)];
      await setFollow(t, reader, author.id);
      const shopId = await newShop(t);
      for (let i = 0; i < 3; i++) await postBlog(t, author, shopId);
      await t.settle();
      return await call(t.app, "GET", "/api/blog/of/follow?offset=0", { token: token(reader) });
    },
    ok: (b) => b.success && ((b.data as { list?: unknown[] } | undefined)?.list?.length ?? 0) > 0,
  },
  "note detail": {
    // Was 2 (note, then likes): both at once.
    budget: 1,
    run: async () => {
      const blogId = await postBlog(t, await newUser(t), await newShop(t));
      return await call(t.app, "GET", `/api/blog/${blogId}`, { token: token(await newUser(t)) });
    },
  },
};

function rand(): number {
  return Math.floor(Math.random() * 250) + 1;
}

/** A shop in MySQL only: neither L1 nor Redis has seen it. */
async function coldShop(typeId: number, at: { x: number; y: number } = HANGZHOU): Promise<number> {
  return await insertShop(t.deps, {
    name: `cold-${crypto.randomUUID().slice(0, 8)}`,
    typeId,
    images: "/imgs/a.jpg",
    area: "test",
    address: "test road 1",
    x: at.x,
    y: at.y,
    avgPrice: 80,
    openHours: "10:00-22:00",
  });
}

describe("trip budgets (sequential dependency trips on the critical path, counted at the ports)", () => {
  for (const [name, op] of Object.entries(OPERATIONS)) {
    test(`${name}: at most ${op.budget}${op.target !== undefined ? ` (target ${op.target})` : ""}`, async () => {
      const runs: Trips[] = [];
      for (let rep = 0; rep <= REPS; rep++) {
        const res = await op.run();
        const body = res.body as { success: boolean; code?: string; data?: unknown };
        expect(op.ok ? op.ok(body) : body.success).toBe(true);
        // Background work of the setup and of this request must not leak into the next count.
        await t.settle();
        if (rep > 0) runs.push(tripsOf(res.headers));
      }
      measured.set(name, runs);
      expect(Math.max(...runs.map((r) => r.sequential))).toBeLessThanOrEqual(op.budget);
    }, 60_000);
  }
});

test("a response that made no trip says so; one that did names its dependencies", async () => {
  const id = await newShop(t);
  await call(t.app, "GET", `/api/shop/${id}`);
  const warm = await call(t.app, "GET", `/api/shop/${id}`);
  expect(warm.headers.get("server-timing")).toBe('trips;desc="0 in sequence"');
  const cold = await call(t.app, "GET", `/api/shop/${await coldShop(await createShopType(t))}`);
  expect(cold.headers.get("server-timing")).toMatch(/^redis;desc="\d+ trips?[^"]*";dur=[\d.]+, db;desc="1 trip";dur=/);
});

/**
 * The hot operations whose dependency trips are held (tests/http/trip-budget.test.ts) and measured
 * at a distance (scripts/bench/scenarios/trips.ts), defined once for both.
 *
 * An operation sets up one fresh instance (fresh users and ids) and returns the measured request's
 * answer. Setup that only needs data goes through `setup` (an app on the same stack, at no
 * distance); requests whose effect lives in the measured app's isolate (an L1 entry, a sold-out
 * memo, a held order) go through `call`, like the measured request. In the test both are the same
 * in-process app; in the bench `call` is HTTP to the server under test, whose dependencies are
 * behind latency proxies. `settle` waits until the setup's and the measured app's background work
 * has finished, so it does not leak into the next count.
 */
import type { Envelope } from "./http.ts";
import { call as callApp, uniquePhone } from "./http.ts";
import { insertShop } from "../../src/services/shops.ts";
import { addShopToGeo } from "../../src/services/shop-geo.ts";
import { keys } from "../../src/redis/keys.ts";
import type { DevSms } from "../../src/sms/index.ts";
import { createShopType, east, HANGZHOU } from "./fixtures.ts";
import { createSeckill } from "./seckill.ts";
import { newShop, newUser, postBlog, setFollow, type TestUser } from "./social.ts";
import { eventually, type TestApp } from "./stack.ts";

export interface Answer {
  status: number;
  headers: Headers;
  body: Envelope;
  /** Client-side latency of the request, ms (set by the bench's caller). */
  ms?: number;
}

export type Caller = (
  method: string,
  path: string,
  opts?: { token?: string; json?: unknown; ip?: string },
) => Promise<Answer>;

export interface OperationContext {
  /** An app on the same stack for data setup (its DevSms, deps and routes). */
  setup: TestApp;
  /** The app under measurement. */
  call: Caller;
  /** Waits for the setup's and the measured app's background work. */
  settle(): Promise<void>;
}

export interface Operation {
  /** Held by the trip-budget test: today's measured sequential trips (undefined: not held there). */
  budget?: number;
  /** The design target (critical path), when it differs from the budget. */
  target?: number;
  /**
   * Sets up one fresh instance and returns the measured answer; everything before it is setup.
   * An operation made of several requests (the buyer's journey) returns them all, in order.
   */
  run: (c: OperationContext) => Promise<Answer | Answer[]>;
  /** Does the (last) answer say the operation did what it is meant to? Default: `success`. */
  ok?: (body: Envelope) => boolean;
}

/** The counts a response reports in `Server-Timing` (src/ports/trips.ts). */
export interface Trips {
  /** Sequential trips on the critical path. */
  sequential: number;
  redisTrips: number;
  redisCommands: number;
  dbTrips: number;
  qstashTrips: number;
}

/** Reads the counts back from a response's Server-Timing header (null: the app sends none). */
export function tripsOf(headers: Headers): Trips | null {
  const h = headers.get("server-timing");
  if (h === null) return null;
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

/** The in-process caller of the tests: `app.request` with a chosen client address. */
export function inProcessCaller(t: TestApp): Caller {
  return (method, path, opts) => callApp(t.app, method, path, opts);
}

function rand(): number {
  return Math.floor(Math.random() * 250) + 1;
}

const randomIp = (a: number) => `10.${a}.${rand()}.${rand()}`;

/** A shop in MySQL only: neither L1 nor Redis has seen it. */
async function coldShop(t: TestApp, typeId: number, at: { x: number; y: number } = HANGZHOU): Promise<number> {
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

async function orderWritten(t: TestApp, id: string): Promise<void> {
  await eventually("order written", async () => {
    const rows = (await t.deps.db.execute("SELECT status FROM tb_voucher_order WHERE id = ?", [BigInt(id)])).rows;
    return rows.length > 0;
  });
}

/** A written, unpaid order of a fresh buyer (placed through `setup`). */
async function placedOrder(c: OperationContext): Promise<{ buyer: TestUser; id: string }> {
  const { voucherId } = await createSeckill(c.setup, { stock: 5 });
  const buyer = await newUser(c.setup);
  const res = await callApp(c.setup.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token: buyer.token });
  const id = res.body.data as string;
  await orderWritten(c.setup, id);
  return { buyer, id };
}

/** The login code last sent to `phone`, read where the app keeps it (any app may have sent it). */
async function codeOf(t: TestApp, phone: string): Promise<string> {
  const code = await t.deps.redis.hget<string | number>(keys.loginCode(phone), "code");
  if (code === null || code === undefined) throw new Error(`no login code for ${phone}`);
  return String(code).padStart(6, "0");
}

const attempt = (c: OperationContext, voucherId: number, buyer: TestUser) =>
  c.call("POST", `/api/voucher-order/seckill/${voucherId}`, { token: buyer.token });

export const OPERATIONS: Record<string, Operation> = {
  "send a code": {
    budget: 4,
    target: 1,
    run: (c) => c.call("POST", `/api/user/code?phone=${uniquePhone()}`, { ip: randomIp(9) }),
  },
  "login, existing user": {
    // Was 5 (code check, consume, INSERT IGNORE, SELECT): the user's SELECT now runs beside the consume.
    budget: 3,
    target: 2,
    run: async (c) => {
      const phone = uniquePhone();
      await c.setup.deps.db.execute("INSERT INTO tb_user (phone, nick_name) VALUES (?, ?)", [phone, `user_${rand()}`]);
      await callApp(c.setup.app, "POST", `/api/user/code?phone=${phone}`, { ip: randomIp(8) });
      const code = (c.setup.deps.sms as DevSms).lastCode(phone);
      return await c.call("POST", "/api/user/login", { json: { phone, code } });
    },
  },
  "shop read, cold (L1 and Redis miss)": {
    budget: 3,
    target: 2,
    run: async (c) => c.call("GET", `/api/shop/${await coldShop(c.setup, await createShopType(c.setup))}`),
  },
  "vouchers of a shop, first read": {
    budget: 3,
    target: 2,
    run: async (c) => {
      const { shopId } = await createSeckill(c.setup, { stock: 10 });
      // Creating it filled the cache: forgotten here (L1 and Redis), as if never read.
      await c.setup.deps.isolate.caches.vouchers.delete(c.setup.deps, shopId);
      return await c.call("GET", `/api/voucher/list/${shopId}`);
    },
  },
  "nearby (type + x,y, Redis cold)": {
    budget: 4,
    target: 2,
    run: async (c) => {
      const typeId = await createShopType(c.setup);
      for (let i = 1; i <= 5; i++) {
        const at = east(HANGZHOU, 100 * i);
        const id = await coldShop(c.setup, typeId, at);
        await addShopToGeo(c.setup.deps.redis, { id, typeId, ...at });
      }
      return await c.call("GET", `/api/shop/of/type?typeId=${typeId}&current=1&x=${HANGZHOU.x}&y=${HANGZHOU.y}`);
    },
    ok: (b) => b.success && Array.isArray(b.data) && b.data.length === 5,
  },
  "seckill attempt while stock lasts": {
    budget: 2,
    target: 1,
    run: async (c) => {
      const { voucherId } = await createSeckill(c.setup, { stock: 10 });
      return await attempt(c, voucherId, await newUser(c.setup));
    },
    ok: (b) => b.success && typeof b.data === "string",
  },
  "sold-out attempt": {
    budget: 0,
    run: async (c) => {
      const { voucherId } = await createSeckill(c.setup, { stock: 1 });
      await attempt(c, voucherId, await newUser(c.setup));
      // The first refusal learns the sale is over; the measured one is answered from it.
      await attempt(c, voucherId, await newUser(c.setup));
      return await attempt(c, voucherId, await newUser(c.setup));
    },
    ok: (b) => !b.success && b.code === "SOLD_OUT",
  },
  "already-holding attempt": {
    budget: 0,
    run: async (c) => {
      const { voucherId } = await createSeckill(c.setup, { stock: 5 });
      const buyer = await newUser(c.setup);
      await attempt(c, voucherId, buyer);
      return await attempt(c, voucherId, buyer);
    },
    ok: (b) => !b.success && b.code === "DUPLICATE_ORDER",
  },
  "L1 shop read": {
    budget: 0,
    run: async (c) => {
      const id = await newShop(c.setup);
      await c.call("GET", `/api/shop/${id}`);
      return await c.call("GET", `/api/shop/${id}`);
    },
  },
  "/me (warm session)": {
    budget: 0,
    run: async (c) => c.call("GET", "/api/user/me", { token: (await newUser(c.setup)).token }),
  },
  "pay (as the client sees it)": {
    budget: 3,
    target: 2,
    run: async (c) => {
      const { buyer, id } = await placedOrder(c);
      return await c.call("POST", `/api/voucher-order/${id}/pay`, { token: buyer.token });
    },
  },
  "order lookup": {
    budget: 1,
    run: async (c) => {
      const { buyer, id } = await placedOrder(c);
      return await c.call("GET", `/api/voucher-order/${id}`, { token: buyer.token });
    },
  },
  like: {
    // Was 4 (limiter, note SELECT, toggle, column UPDATE): the SELECT runs beside the toggle and the
    // column is written in the background. The limiter's own trip remains (docs/decisions/trips.md).
    budget: 2,
    target: 1,
    run: async (c) => {
      const blogId = await postBlog(c.setup, await newUser(c.setup), await newShop(c.setup));
      return await c.call("PUT", `/api/blog/like/${blogId}`, { token: (await newUser(c.setup)).token });
    },
  },
  follow: {
    // Was 5 (limiter, existence SELECT, INSERT, SADD, backfill): the INSERT selects the target
    // (its own existence check) beside the SADD; the backfill runs in the background.
    budget: 2,
    run: async (c) => {
      const [who, target] = [await newUser(c.setup), await newUser(c.setup)];
      return await c.call("PUT", `/api/follow/${target.id}/true`, { token: who.token });
    },
  },
  "publish a note (20 followers)": {
    // Was 5 (limiter, shop SELECT, INSERT, followers, push): the INSERT selects the shop; the
    // fan-out runs in the background.
    budget: 2,
    run: async (c) => {
      const author = await newUser(c.setup);
      for (let i = 0; i < 20; i++) await setFollow(c.setup, await newUser(c.setup), author.id);
      const shopId = await newShop(c.setup);
      return await c.call("POST", "/api/blog", {
        token: author.token,
        json: { shopId, title: `n-${rand()}`, content: "trip budget", images: "/imgs/blogs/1/2/a.jpg" },
      });
    },
  },
  "feed page": {
    // Was 3 (inbox, notes, likes): the likes lookup runs beside the notes' SELECT.
    budget: 2,
    run: async (c) => {
      const [reader, author] = [await newUser(c.setup), await newUser(c.setup)];
      await setFollow(c.setup, reader, author.id);
      const shopId = await newShop(c.setup);
      for (let i = 0; i < 3; i++) await postBlog(c.setup, author, shopId);
      await c.settle();
      return await c.call("GET", "/api/blog/of/follow?offset=0", { token: reader.token });
    },
    ok: (b) => b.success && ((b.data as { list?: unknown[] } | undefined)?.list?.length ?? 0) > 0,
  },
  "note detail": {
    // Was 2 (note, then likes): both at once.
    budget: 1,
    run: async (c) => {
      const blogId = await postBlog(c.setup, await newUser(c.setup), await newShop(c.setup));
      return await c.call("GET", `/api/blog/${blogId}`, { token: (await newUser(c.setup)).token });
    },
  },
};

/**
 * The buyer's journey, every step through the measured app: send a code, log in (a new user), list
 * shops of a type, open a cold shop, its vouchers (first read), the attempt, pay, look the order up.
 * The order must be written before it can be paid: the wait for it is setup, not part of a step.
 */
export const BUYERS_JOURNEY: Operation = {
  run: async (c) => {
    const typeId = await createShopType(c.setup);
    const shopId = await coldShop(c.setup, typeId);
    await addShopToGeo(c.setup.deps.redis, { id: shopId, typeId, ...HANGZHOU });
    const { voucherId } = await createSeckill(c.setup, { stock: 10, shopId });
    await c.setup.deps.isolate.caches.vouchers.delete(c.setup.deps, shopId);
    const phone = uniquePhone();
    const steps: Answer[] = [];
    const step = async (a: Promise<Answer>) => {
      const r = await a;
      if (!r.body.success) throw new Error(`journey step ${steps.length + 1} failed: ${JSON.stringify(r.body)}`);
      steps.push(r);
      return r;
    };
    await step(c.call("POST", `/api/user/code?phone=${phone}`, { ip: randomIp(7) }));
    const token = (
      await step(c.call("POST", "/api/user/login", { json: { phone, code: await codeOf(c.setup, phone) } }))
    ).body.data as string;
    await step(c.call("GET", `/api/shop/of/type?typeId=${typeId}&current=1&x=${HANGZHOU.x}&y=${HANGZHOU.y}`));
    await step(c.call("GET", `/api/shop/${shopId}`));
    await step(c.call("GET", `/api/voucher/list/${shopId}`));
    const id = (await step(c.call("POST", `/api/voucher-order/seckill/${voucherId}`, { token }))).body.data as string;
    await orderWritten(c.setup, id);
    await step(c.call("POST", `/api/voucher-order/${id}/pay`, { token }));
    await step(c.call("GET", `/api/voucher-order/${id}`, { token }));
    return steps;
  },
};

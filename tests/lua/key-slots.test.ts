/**
 * One script, one slot: the KEYS of every Lua call must hash to one Redis Cluster slot (CRC16 of
 * the key's hash tag, mod 16384), or the script is invalid on a clustered Redis. Checked on what
 * the call sites actually send: a relay in front of the Upstash-REST stand-in records every
 * EVAL/EVALSHA (single, pipelined or in a transaction) while real flows run through the app, and
 * the key builders the cache scripts use are checked over many ids.
 *
 * The session scripts are the known exception (lua/session-sync.lua "Cluster note": the classic
 * `login:token:<token>` names cannot share a tag); they are named below so a new one cannot hide.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { HttpRelay, requestBody } from "../../scripts/stack/http-relay.ts";
import { keys } from "../../src/redis/keys.ts";
import { luaSources, type ScriptName } from "../../src/redis/scripts.ts";
import { maxShopId } from "../../src/services/shops.ts";
import { call } from "../support/http.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { newShop, newUser, postBlog } from "../support/social.ts";
import { createTestApp, getStack, type TestApp } from "../support/stack.ts";

/** CRC16-CCITT (XMODEM), as Redis Cluster uses it. */
function crc16(bytes: Uint8Array): number {
  let crc = 0;
  for (const b of bytes) {
    crc ^= b << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/** The cluster slot of a key: of its hash tag (the text between the first `{` and the next `}`, if not empty). */
function keySlot(key: string): number {
  const open = key.indexOf("{");
  if (open >= 0) {
    const close = key.indexOf("}", open + 1);
    if (close > open + 1) key = key.slice(open + 1, close);
  }
  return crc16(new TextEncoder().encode(key)) % 16384;
}

const EXEMPT: ReadonlySet<ScriptName> = new Set(["sessionSync", "sessionRevoke"]);

interface ScriptCall {
  name: string;
  keys: string[];
}

/** Forwards everything; records the KEYS of each script call it sees. */
class ScriptRecorder extends HttpRelay {
  readonly calls: ScriptCall[] = [];
  readonly #bySha = new Map<string, string>();

  constructor(target: string) {
    super(target);
    for (const [name, src] of Object.entries(luaSources))
      this.#bySha.set(new Bun.CryptoHasher("sha1").update(src).digest("hex"), name);
  }

  protected async handle(req: Request): Promise<Response> {
    const body = await requestBody(req);
    if (body && body.byteLength > 0) {
      try {
        const parsed = JSON.parse(new TextDecoder().decode(body)) as unknown;
        const commands = Array.isArray(parsed) && Array.isArray(parsed[0]) ? parsed : [parsed];
        for (const c of commands as unknown[][]) this.record(c);
      } catch {
        // not a JSON command: nothing to record
      }
    }
    return await this.forward(req, body);
  }

  private record(c: unknown[]): void {
    const verb = String(c[0] ?? "").toUpperCase();
    if (verb !== "EVAL" && verb !== "EVALSHA") return;
    const script = String(c[1]);
    const sha = verb === "EVALSHA" ? script : new Bun.CryptoHasher("sha1").update(script).digest("hex");
    const n = Number(c[2]);
    this.calls.push({ name: this.#bySha.get(sha) ?? `unknown ${sha}`, keys: c.slice(3, 3 + n).map(String) });
  }
}

let recorder: ScriptRecorder;
let t: TestApp;

beforeAll(async () => {
  const stack = await getStack();
  recorder = new ScriptRecorder(stack.env.UPSTASH_REDIS_REST_URL as string);
  t = await createTestApp({
    UPSTASH_REDIS_REST_URL: recorder.url,
    MISS_PER_ADDRESS: "0",
    SECKILL_USER_LIMIT: "0",
    SECKILL_IP_LIMIT: "0",
  });
});

afterAll(async () => {
  await t?.settle();
  await recorder?.stop();
});

test("the slot function agrees with Redis Cluster's", () => {
  expect(crc16(new TextEncoder().encode("123456789"))).toBe(0x31c3);
  expect(keySlot("foo")).toBe(12182);
  expect(keySlot("{user1000}.following")).toBe(keySlot("{user1000}.followers"));
  expect(keySlot("foo{}{bar}")).toBe(crc16(new TextEncoder().encode("foo{}{bar}")) % 16384);
  expect(keySlot("foo{{bar}}zap")).toBe(keySlot("{bar"));
});

test("a cache entry, its rebuild lock and the ceiling the probe reads for it share one slot, for any id", () => {
  for (const module of ["shop", "seckill", "voucher-list", "shop-type", "user"])
    for (const id of [0, 1, 7, 42, 1_000_003, 2 ** 40, "all", "x:y"]) {
      const slots = new Set(
        [keys.cache(module, id), keys.cacheLock(module, id), keys.cacheCeiling(module, id)].map(keySlot),
      );
      expect(slots.size, `${module} ${id}`).toBe(1);
    }
});

test("every script call the flows make touches keys of one slot (the session scripts excepted, by name)", async () => {
  recorder.calls.length = 0;
  // Cache: a shop found, a missing id below the ceiling and ids above it (probe, fill, ceiling).
  const shopId = await newShop(t);
  expect((await call(t.app, "GET", `/api/shop/${shopId}`)).status).toBe(200);
  const max = await maxShopId(t.deps);
  for (const id of [max + 10, max + 11, max + 5_000, max + 5_001]) {
    expect((await call(t.app, "GET", `/api/shop/${id}`)).body.code).toBe("NOT_FOUND");
  }
  // A seckill purchase and its way to MySQL.
  const v = await createSeckill(t, { stock: 5, buckets: 2 });
  const [buyer] = userIds(1);
  const [token] = await sessionsFor(t, [buyer as number]);
  const bought = await call(t.app, "POST", `/api/voucher-order/seckill/${v.voucherId}`, { token });
  expect(bought.body.success).toBe(true);
  // Sign-in by code, a like, sign-out.
  const user = await newUser(t);
  const blogId = await postBlog(t, user, shopId);
  expect((await call(t.app, "PUT", `/api/blog/like/${blogId}`, { token: user.token })).body.success).toBe(true);
  expect((await call(t.app, "POST", "/api/user/logout", { token: user.token })).status).toBe(200);
  // A wrong operator token (the failed-attempt window).
  expect((await call(t.app, "GET", "/admin/cache/hot", { token: "not-the-token" })).status).toBe(401);
  await t.settle();

  const seen = new Set(recorder.calls.map((c) => c.name));
  for (const name of ["cacheProbe", "cacheFill", "reserveStock", "loginCodeConsume", "blogLikeToggle", "sessionRevoke"])
    expect(seen.has(name), `${name} was called`).toBe(true);
  const crossing = recorder.calls
    .filter((c) => !EXEMPT.has(c.name as ScriptName) && new Set(c.keys.map(keySlot)).size > 1)
    .map((c) => `${c.name}: ${c.keys.join(" ")}`);
  expect([...new Set(crossing)]).toEqual([]);
});

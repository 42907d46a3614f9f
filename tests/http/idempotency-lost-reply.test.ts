/**
 * Idempotency-Key when the claim's reply is lost (issue 15, item 2): the app's Redis sits behind
 * the fault proxy (scripts/stack/fault-proxy.ts) in `replyDelay` mode, matched on the SHA-1 of
 * lua/idempotency-claim.lua, so the claim's EVALSHA reaches Redis and runs — the key becomes
 * "running" under its lease — but its answer is held past REDIS_TIMEOUT_MS. That is the case a
 * dropping proxy never shows: a timeout is not a "no".
 *
 * What happens, and what this test pins down:
 *   1. the request answers 503 UNAVAILABLE with `Retry-After` (the route never ran: nothing is
 *      written, no other 5xx);
 *   2. the claim did run, and the request released it in the background (it knows its claim
 *      token; lua/idempotency-finish.lua is a CAS), so no abandoned lease is left;
 *   3. the client's retry with the same key and body runs the route exactly once (one note row),
 *      and later retries replay that response.
 * (Without the release the retry met 409 for the whole lease, IDEMPOTENCY_LOCK_MS — 60 s by default.)
 */
import { describe, expect, test } from "bun:test";
import { startFaultProxy } from "../../scripts/stack/fault-proxy.ts";
import { keys } from "../../src/redis/keys.ts";
import { luaSources } from "../../src/redis/scripts.ts";
import { call } from "../support/http.ts";
import { newShop, newUser, type TestUser } from "../support/social.ts";
import { createTestApp, eventually, getStack, type TestApp } from "../support/stack.ts";

const REPLAYED = "idempotent-replayed";
/** The Redis deadline in this test, and how long the proxy holds the claim's answer beyond it. */
const REDIS_TIMEOUT_MS = 1_000;
const HOLD_MS = 3 * REDIS_TIMEOUT_MS;
/** The abandoned claim's lease: long enough that the healed retry surely meets it, short enough to wait out. */
const LOCK_MS = 8_000;

const sha1 = (text: string) => new Bun.CryptoHasher("sha1").update(text).digest("hex");
const sha256 = (text: string) => new Bun.CryptoHasher("sha256").update(text).digest("hex");

async function notesOf(t: TestApp, userId: number): Promise<number> {
  const row = (await t.deps.db.execute("SELECT COUNT(*) AS n FROM tb_blog WHERE user_id = ?", [userId])).rows[0] as {
    n: string;
  };
  return Number(row.n);
}

function postNote(t: TestApp, user: TestUser, shopId: number, key: string) {
  return call<number>(t.app, "POST", "/api/blog", {
    token: user.token,
    json: { shopId, title: "lost reply", content: "the claim ran; its answer never came" },
    headers: { "idempotency-key": key },
  });
}

/** The records this user's keys hold in Redis (src/http/idempotency.ts: caller tag = SHA-256 of `caller\nu:<id>`, 32 hex). */
async function heldRecords(t: TestApp, userId: number): Promise<{ key: string; value: string; pttl: number }[]> {
  const callerHash = sha256(`caller\nu:${userId}`).slice(0, 32);
  const prefix = keys.idempotency(callerHash, "");
  const out: { key: string; value: string; pttl: number }[] = [];
  let cursor = "0";
  do {
    const [next, found] = await t.deps.redis.scan(cursor, { match: `${prefix}*`, count: 1000 });
    cursor = String(next);
    for (const k of found) {
      if (k.startsWith(`${prefix}n:`)) continue;
      out.push({ key: k, value: String(await t.deps.redis.get<string>(k)), pttl: await t.deps.redis.pttl(k) });
    }
  } while (cursor !== "0");
  return out;
}

describe("Idempotency-Key: the claim ran but its reply was lost", () => {
  test("the request answers 503 and writes nothing, releases the claim that ran, and the retry runs exactly once", async () => {
    const stack = await getStack();
    const proxy = startFaultProxy(stack.env.UPSTASH_REDIS_REST_URL as string);
    try {
      const t = await createTestApp({
        UPSTASH_REDIS_REST_URL: proxy.url,
        REDIS_TIMEOUT_MS: String(REDIS_TIMEOUT_MS),
        IDEMPOTENCY_LOCK_MS: String(LOCK_MS),
      });
      const author = await newUser(t);
      const shopId = await newShop(t);
      // A keyed note first, through the healthy proxy: the claim script is then loaded in Redis, so
      // the claim below is an EVALSHA (carrying the SHA-1 the proxy matches), not a NOSCRIPT miss.
      const warm = await postNote(t, author, shopId, `warm-${crypto.randomUUID()}`);
      expect(warm.status).toBe(200);
      expect(await notesOf(t, author.id)).toBe(1);
      const before = await heldRecords(t, author.id);

      const claimSha = sha1(luaSources.idempotencyClaim);
      proxy.set({ kind: "replyDelay", ms: HOLD_MS, match: claimSha });
      const key = `lost-${crypto.randomUUID()}`;
      const lost = await postNote(t, author, shopId, key);

      // 1. A clear, retryable 503 — and the route never ran.
      expect(lost.status).toBe(503);
      expect(lost.body).toMatchObject({ success: false, code: "UNAVAILABLE" });
      expect(Number(lost.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(proxy.held).toBeGreaterThanOrEqual(1);
      expect(t.deps.isolate.resilience.redis.snapshot().timeouts).toBeGreaterThanOrEqual(1);
      expect(await notesOf(t, author.id)).toBe(1);

      // 2. The claim ran, and the request released its own claim in the background: no abandoned lease.
      await t.settle();
      await eventually(
        "the lost claim is released",
        async () => (await heldRecords(t, author.id)).filter((r) => !before.some((b) => b.key === r.key)).length === 0,
        10_000,
      );

      // 3. The network heals; the client retries the same request with the same key: one run, then replays.
      proxy.set({ kind: "pass" });
      const done = await postNote(t, author, shopId, key);
      expect(done.status).toBe(200);
      expect(done.headers.get(REPLAYED)).toBeNull();
      expect(done.body.success).toBe(true);
      expect(await notesOf(t, author.id)).toBe(2);
      const replay = await postNote(t, author, shopId, key);
      expect(replay.status).toBe(200);
      expect(replay.headers.get(REPLAYED)).toBe("true");
      expect(replay.body).toEqual(done.body as typeof replay.body);
      expect(await notesOf(t, author.id)).toBe(2);
      await t.settle();
    } finally {
      await proxy.stop();
    }
  }, 60_000);
});

/**
 * Idempotency-Key (src/http/idempotency.ts) on the real app, real Redis and MariaDB: concurrent
 * duplicates, replays, 409/422, scopes, failures that must not be stored, an abandoned claim's
 * lease, and each kind of route that takes the header (notes, likes, follows, uploads, payments,
 * operator writes).
 */
import { describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { DbPort, Deps } from "../../src/deps.ts";
import { parseIdempotencyKey } from "../../src/http/idempotency.ts";
import { Faults } from "../support/faults.ts";
import { createShopType, HANGZHOU, operator } from "../support/fixtures.ts";
import { call } from "../support/http.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { newShop, newUser, postBlog, type TestUser } from "../support/social.ts";
import { createTestApp, eventually, serveTestApp, type TestApp } from "../support/stack.ts";

const key = () => `k-${crypto.randomUUID()}`;
const REPLAYED = "idempotent-replayed";

async function notesOf(t: TestApp, userId: number): Promise<number> {
  const row = (await t.deps.db.execute("SELECT COUNT(*) AS n FROM tb_blog WHERE user_id = ?", [userId])).rows[0] as {
    n: string;
  };
  return Number(row.n);
}

function postNote(t: TestApp, user: TestUser, shopId: number, idemKey: string | null, title = "same note") {
  return call<number>(t.app, "POST", "/api/blog", {
    token: user.token,
    json: { shopId, title, content: "same content" },
    headers: idemKey === null ? {} : { "idempotency-key": idemKey },
  });
}

describe("Idempotency-Key: concurrent duplicates and replays", () => {
  test("20 parallel same-key notes write one row; the rest are replays or 409 with Retry-After, and every later retry replays it exactly", async () => {
    const t = await createTestApp();
    const author = await newUser(t);
    const shopId = await newShop(t);
    const k = key();
    const results = await Promise.all(Array.from({ length: 20 }, () => postNote(t, author, shopId, k)));
    expect(await notesOf(t, author.id)).toBe(1);
    const executed = results.filter((r) => r.status === 200 && r.headers.get(REPLAYED) === null);
    expect(executed.length).toBe(1);
    const first = executed[0]!;
    expect(first.body.success).toBe(true);
    for (const r of results) {
      if (r === first) continue;
      if (r.status === 409) {
        expect(r.body).toMatchObject({ success: false, code: "CONFLICT" });
        expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      } else {
        expect(r.status).toBe(200);
        expect(r.headers.get(REPLAYED)).toBe("true");
        expect(r.body).toEqual(first.body);
      }
    }
    for (let i = 0; i < 3; i++) {
      const again = await postNote(t, author, shopId, k);
      expect(again.status).toBe(200);
      expect(again.headers.get(REPLAYED)).toBe("true");
      expect(again.headers.get("content-type")).toBe(first.headers.get("content-type"));
      expect(again.body).toEqual(first.body);
    }
    expect(await notesOf(t, author.id)).toBe(1);
    // Without the header nothing changes: each post is a new note.
    await postNote(t, author, shopId, null);
    await postNote(t, author, shopId, null);
    expect(await notesOf(t, author.id)).toBe(3);
  });

  test("10 parallel same-key likes are one like, and a late retry replays instead of un-liking", async () => {
    const t = await createTestApp();
    const author = await newUser(t);
    const fan = await newUser(t);
    const blogId = await postBlog(t, author, await newShop(t));
    const k = key();
    const like = () =>
      call(t.app, "PUT", `/api/blog/like/${blogId}`, { token: fan.token, headers: { "idempotency-key": k } });
    const results = await Promise.all(Array.from({ length: 10 }, like));
    expect(results.filter((r) => r.status === 200 && r.headers.get(REPLAYED) === null).length).toBe(1);
    const likedNow = async () => (await t.deps.redis.zscore(`blog:liked:{${blogId}}`, String(fan.id))) !== null;
    expect(await likedNow()).toBe(true);
    const late = await like();
    expect(late.headers.get(REPLAYED)).toBe("true");
    expect(late.body).toEqual({ success: true });
    expect(await likedNow()).toBe(true);
  });

  test("parallel same-key follows run once, and a follow's retry after an unfollow replays instead of following again", async () => {
    const t = await createTestApp();
    const me = await newUser(t);
    const star = await newUser(t);
    const k = key();
    const follow = () =>
      call(t.app, "PUT", `/api/follow/${star.id}/true`, { token: me.token, headers: { "idempotency-key": k } });
    const results = await Promise.all(Array.from({ length: 10 }, follow));
    expect(results.filter((r) => r.status === 200 && r.headers.get(REPLAYED) === null).length).toBe(1);
    expect(results.every((r) => r.status === 409 || r.body.success === true)).toBe(true);
    expect(
      (
        await call(t.app, "PUT", `/api/follow/${star.id}/false`, {
          token: me.token,
          headers: { "idempotency-key": key() },
        })
      ).body.success,
    ).toBe(true);
    // The original follow's lost reply is retried late: it must not undo the unfollow.
    const retry = await follow();
    expect(retry.headers.get(REPLAYED)).toBe("true");
    const rows = (
      await t.deps.db.execute("SELECT COUNT(*) AS n FROM tb_follow WHERE user_id = ? AND follow_user_id = ?", [
        me.id,
        star.id,
      ])
    ).rows[0] as { n: string };
    expect(Number(rows.n)).toBe(0);
  });
});

describe("Idempotency-Key: quota", () => {
  test("past IDEMPOTENCY_KEYS_PER_HOUR new keys a caller gets 429 + Retry-After; its held keys still replay, unkeyed requests and other callers are unaffected", async () => {
    const t = await createTestApp({ IDEMPOTENCY_KEYS_PER_HOUR: "3" });
    const author = await newUser(t);
    const other = await newUser(t);
    const blogId = await postBlog(t, author, await newShop(t));
    const like = (who: TestUser, k: string | null) =>
      call(t.app, "PUT", `/api/blog/like/${blogId}`, { token: who.token, headers: k ? { "idempotency-key": k } : {} });
    const held = [key(), key(), key()];
    for (const k of held) expect((await like(author, k)).status).toBe(200);
    const refused = await like(author, key());
    expect(refused.status).toBe(429);
    expect(refused.body.code).toBe("RATE_LIMITED");
    const retryAfter = Number(refused.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(3600);
    // The refused key was not taken: nothing stored under it.
    const replay = await like(author, held[0] as string);
    expect(replay.status).toBe(200);
    expect(replay.headers.get(REPLAYED)).toBe("true");
    expect((await like(author, null)).status).toBe(200);
    expect((await like(other, key())).status).toBe(200);
  });
});

describe("Idempotency-Key: Redis budget", () => {
  test("no header: no idempotency command; a keyed request that runs: 2 (claim, finish); a replay, a 409 or a 422: 1", async () => {
    const faults = new Faults();
    let idem = 0;
    // A rule that never applies: it only counts the idempotency scripts' EVALSHAs (their KEYS name idem:…).
    faults.on("redis.evalsha", "tap", {
      when: (args) => {
        if (JSON.stringify(args[1]).includes("idem:")) idem++;
        return false;
      },
    });
    const t = await createTestApp({}, { wrap: (deps) => faults.wrap(deps) });
    const author = await newUser(t);
    const shopId = await newShop(t);
    const counted = async (send: () => Promise<unknown>) => {
      const before = idem;
      await send();
      return idem - before;
    };
    expect(await counted(() => postNote(t, author, shopId, null))).toBe(0);
    const k = key();
    expect(await counted(() => postNote(t, author, shopId, k))).toBe(2);
    expect(await counted(() => postNote(t, author, shopId, k))).toBe(1);
    expect(await counted(() => postNote(t, author, shopId, k, "other"))).toBe(1);
    expect(
      await counted(() =>
        call(t.app, "GET", "/api/blog/of/me", { token: author.token, headers: { "idempotency-key": k } }),
      ),
    ).toBe(0);
  });
});

describe("Idempotency-Key: fingerprints and scopes", () => {
  test("the same key with a different body or query string is 422; the same request still replays", async () => {
    const t = await createTestApp();
    const author = await newUser(t);
    const shopId = await newShop(t);
    const k = key();
    const first = await postNote(t, author, shopId, k, "one");
    expect(first.status).toBe(200);
    const other = await postNote(t, author, shopId, k, "two");
    expect(other.status).toBe(422);
    expect(other.body).toMatchObject({ success: false, code: "IDEMPOTENCY_KEY_REUSED" });
    // Same path, other query string: a different request too.
    const query = await call(t.app, "POST", "/api/blog?x=1", {
      token: author.token,
      json: { shopId, title: "one", content: "same content" },
      headers: { "idempotency-key": k },
    });
    expect(query.status).toBe(422);
    const same = await postNote(t, author, shopId, k, "one");
    expect(same.headers.get(REPLAYED)).toBe("true");
    expect(same.body).toEqual(first.body);
    expect(await notesOf(t, author.id)).toBe(1);
  });

  test("different callers with the same key, and the same key on another route, are independent", async () => {
    const t = await createTestApp();
    const a = await newUser(t);
    const b = await newUser(t);
    const shopId = await newShop(t);
    const k = key();
    const ra = await postNote(t, a, shopId, k);
    const rb = await postNote(t, b, shopId, k);
    for (const r of [ra, rb]) {
      expect(r.status).toBe(200);
      expect(r.headers.get(REPLAYED)).toBeNull();
    }
    expect(ra.body.data).not.toBe(rb.body.data);
    expect(await notesOf(t, a.id)).toBe(1);
    expect(await notesOf(t, b.id)).toBe(1);
    // a's key on another route (sign-in, a like of b's note) runs there as a fresh request.
    const sign = await call(t.app, "POST", "/api/user/sign", { token: a.token, headers: { "idempotency-key": k } });
    const like = await call(t.app, "PUT", `/api/blog/like/${rb.body.data}`, {
      token: a.token,
      headers: { "idempotency-key": k },
    });
    for (const r of [sign, like]) {
      expect(r.status).toBe(200);
      expect(r.body.success).toBe(true);
      expect(r.headers.get(REPLAYED)).toBeNull();
    }
    expect(
      (await call(t.app, "POST", "/api/user/sign", { token: a.token, headers: { "idempotency-key": k } })).headers.get(
        REPLAYED,
      ),
    ).toBe("true");
  });

  test("a malformed key is a 400 envelope and the route does not run", async () => {
    const t = await createTestApp();
    const author = await newUser(t);
    const shopId = await newShop(t);
    for (const bad of ["", "x".repeat(256), "has space", '"unterminated', '"bad\\q"', '""']) {
      const res = await postNote(t, author, shopId, bad);
      expect(res.status, JSON.stringify(bad)).toBe(400);
      expect(res.body).toMatchObject({ success: false, code: "INVALID_INPUT" });
    }
    expect(await notesOf(t, author.id)).toBe(0);
    // The draft's sf-string form and Stripe's bare form name the same key.
    expect(parseIdempotencyKey('"a\\"b"')).toBe('a"b');
    const quoted = await postNote(t, author, shopId, '"key-1"');
    const bare = await postNote(t, author, shopId, "key-1");
    expect(quoted.headers.get(REPLAYED)).toBeNull();
    expect(bare.headers.get(REPLAYED)).toBe("true");
    expect(await notesOf(t, author.id)).toBe(1);
  });
});

describe("Idempotency-Key: what is not stored", () => {
  test("a failed request (the MySQL write fails once) is not stored: the retry runs, and its success is what replays", async () => {
    const faults = new Faults();
    const t = await createTestApp({}, { wrap: (deps) => faults.wrap(deps) });
    const author = await newUser(t);
    const shopId = await newShop(t);
    faults.on("db.execute", "fail", { times: 1, when: (args) => String(args[0]).startsWith("INSERT INTO tb_blog") });
    const k = key();
    const failed = await postNote(t, author, shopId, k);
    expect(failed.status).toBe(500);
    expect(await notesOf(t, author.id)).toBe(0);
    const retried = await postNote(t, author, shopId, k);
    expect(retried.status).toBe(200);
    expect(retried.headers.get(REPLAYED)).toBeNull();
    const replay = await postNote(t, author, shopId, k);
    expect(replay.headers.get(REPLAYED)).toBe("true");
    expect(replay.body).toEqual(retried.body);
    expect(await notesOf(t, author.id)).toBe(1);
  });

  test("with the idempotency store down, a keyed request is refused with a retryable 503 and the route does not run", async () => {
    const faults = new Faults();
    const t = await createTestApp({}, { wrap: (deps) => faults.wrap(deps) });
    const author = await newUser(t);
    const shopId = await newShop(t);
    faults.on("redis.evalsha", "fail", { times: 1, when: (args) => JSON.stringify(args[1]).includes("idem:") });
    const k = key();
    const refused = await postNote(t, author, shopId, k);
    expect(refused.status).toBe(503);
    expect(refused.body).toMatchObject({ success: false, code: "UNAVAILABLE" });
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(await notesOf(t, author.id)).toBe(0);
    expect((await postNote(t, author, shopId, k)).status).toBe(200);
    expect(await notesOf(t, author.id)).toBe(1);
  });

  test("a refusal (unknown shop: 200 success:false, a business outcome) is not stored: the same key then runs the corrected request", async () => {
    const t = await createTestApp();
    const author = await newUser(t);
    const shopId = await newShop(t);
    const k = key();
    const refused = await call(t.app, "POST", "/api/blog", {
      token: author.token,
      json: { shopId: 987654321, title: "t", content: "c" },
      headers: { "idempotency-key": k },
    });
    expect({ status: refused.status, code: refused.body.code }).toEqual({ status: 200, code: "NOT_FOUND" });
    const fixed = await call(t.app, "POST", "/api/blog", {
      token: author.token,
      json: { shopId, title: "t", content: "c" },
      headers: { "idempotency-key": k },
    });
    expect(fixed.status).toBe(200);
    expect(fixed.headers.get(REPLAYED)).toBeNull();
    expect(
      (
        await call(t.app, "POST", "/api/blog", {
          token: author.token,
          json: { shopId, title: "t", content: "c" },
          headers: { "idempotency-key": k },
        })
      ).headers.get(REPLAYED),
    ).toBe("true");
  });

  test("a claim whose request never finishes (a dead process) holds the key only for its lease; then a retry runs", async () => {
    // The first note INSERT is frozen until the end of the test: its request stands for a process
    // that died after claiming the key.
    let release!: () => void;
    const frozen = new Promise<void>((r) => {
      release = r;
    });
    let froze = false;
    const freezeFirstInsert = (deps: Deps): Deps => {
      const db: DbPort = {
        execute: ((sql: string, ...rest: unknown[]) => {
          if (!froze && sql.startsWith("INSERT INTO tb_blog")) {
            froze = true;
            return frozen.then(() => (deps.db.execute as (...a: unknown[]) => unknown)(sql, ...rest));
          }
          return (deps.db.execute as (...a: unknown[]) => unknown)(sql, ...rest);
        }) as DbPort["execute"],
        transaction: deps.db.transaction.bind(deps.db),
      };
      return { ...deps, db };
    };
    const t = await createTestApp({ IDEMPOTENCY_LOCK_MS: "300" }, { wrap: freezeFirstInsert });
    const author = await newUser(t);
    const shopId = await newShop(t);
    const k = key();
    const abandoned = postNote(t, author, shopId, k);
    await eventually("the first request is frozen inside the route", async () => froze);
    const busy = await postNote(t, author, shopId, k);
    expect(busy.status).toBe(409);
    expect(busy.headers.get("retry-after")).toBe("1");
    // Another request under the running key is refused as a reuse, not queued behind it.
    const reused = await postNote(t, author, shopId, k, "another note");
    expect(reused.status).toBe(422);
    expect(reused.body).toMatchObject({ success: false, code: "IDEMPOTENCY_KEY_REUSED" });
    let retried: Awaited<ReturnType<typeof postNote>> | undefined;
    await eventually("a retry runs once the lease has ended", async () => {
      const r = await postNote(t, author, shopId, k);
      if (r.status === 409) return false;
      retried = r;
      return true;
    });
    expect(retried!.status).toBe(200);
    expect(retried!.headers.get(REPLAYED)).toBeNull();
    // The frozen request completes late: its claim is gone, so it stores nothing over the retry's.
    release();
    expect((await abandoned).status).toBe(200);
    const replay = await postNote(t, author, shopId, k);
    expect(replay.headers.get(REPLAYED)).toBe("true");
    expect(replay.body).toEqual(retried!.body);
  });
});

describe("Idempotency-Key on payments, uploads and operator writes", () => {
  test("a pay retry after the payment settled replays the same payment instead of BAD_STATE", async () => {
    const t = await serveTestApp({ LOCAL_PAYMENT_DELAY_MS: "0" });
    try {
      const { voucherId } = await createSeckill(t, { stock: 10, payValue: 4200 });
      const userId = userIds(1)[0] as number;
      const orderId = `${1 + Math.floor(Math.random() * 8)}${String(Date.now()).padStart(17, "0")}`;
      await t.deps.db.execute("INSERT INTO tb_voucher_order (id, user_id, voucher_id, status) VALUES (?, ?, ?, 1)", [
        BigInt(orderId),
        userId,
        voucherId,
      ]);
      const [token] = await sessionsFor(t, [userId]);
      const k = key();
      const pay = () =>
        call<{ paymentId: string }>(t.app, "POST", `/api/voucher-order/${orderId}/pay`, {
          token: token as string,
          headers: { "idempotency-key": k },
        });
      const first = await pay();
      expect(first.body.success).toBe(true);
      await eventually("the provider's webhook paid the order", async () => {
        const row = (await t.deps.db.execute("SELECT status FROM tb_voucher_order WHERE id = ?", [BigInt(orderId)]))
          .rows[0] as { status: number };
        return Number(row.status) === 2;
      });
      const retry = await pay();
      expect(retry.headers.get(REPLAYED)).toBe("true");
      expect(retry.body).toEqual(first.body);
      const payments = (
        await t.deps.db.execute("SELECT COUNT(*) AS n FROM tb_payment WHERE order_id = ?", [BigInt(orderId)])
      ).rows[0] as { n: string };
      expect(Number(payments.n)).toBe(1);
    } finally {
      await t.stop();
    }
  });

  test("an upload retry replays its name and stores no second file; a different file under the key is 422", async () => {
    const root = mkdtempSync(join(tmpdir(), "cityhub-idem-upload-"));
    try {
      const dir = join(root, "uploads");
      mkdirSync(dir, { recursive: true });
      const t = await createTestApp({ UPLOAD_DIR: dir, MAX_BODY_BYTES: "1024" });
      const user = await newUser(t);
      // Larger than MAX_BODY_BYTES: the upload keeps its own limit when the body is fingerprinted.
      const png = new Uint8Array(3000);
      png.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
      // Each send serialises a new FormData, so each has its own multipart boundary (as a browser's retry would).
      const send = (bytes: Uint8Array) => {
        const form = new FormData();
        form.append("file", new File([bytes as Uint8Array<ArrayBuffer>], "a.png", { type: "image/png" }));
        return call<string>(t.app, "POST", "/api/upload/blog", {
          token: user.token,
          body: form,
          headers: { "idempotency-key": k },
        });
      };
      const k = key();
      const first = await send(png);
      expect(first.status).toBe(200);
      expect(first.body.success).toBe(true);
      const again = await send(png);
      expect(again.headers.get(REPLAYED)).toBe("true");
      expect(again.body.data).toBe(first.body.data);
      const files = (readdirSync(dir, { recursive: true }) as string[]).filter((f) => /\.[a-z]+$/.test(f));
      expect(files.length).toBe(1);
      expect(existsSync(join(dir, first.body.data as string))).toBe(true);
      const other = png.slice();
      other[100] = 1;
      expect((await send(other)).status).toBe(422);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  test("an operator's shop create replays the same id with one row; the scope is the operator, not a user", async () => {
    const t = await createTestApp();
    const typeId = await createShopType(t);
    const name = `idem-shop-${crypto.randomUUID().slice(0, 8)}`;
    const k = key();
    const create = () =>
      call<number>(t.app, "POST", "/api/shop", {
        token: operator(t),
        json: { name, typeId, address: "road 1", ...HANGZHOU },
        headers: { "idempotency-key": k },
      });
    const results = await Promise.all([create(), create(), create()]);
    const ids = new Set(results.filter((r) => r.status === 200).map((r) => r.body.data));
    expect(ids.size).toBe(1);
    const replay = await create();
    expect(replay.headers.get(REPLAYED)).toBe("true");
    expect(ids.has(replay.body.data)).toBe(true);
    const rows = (await t.deps.db.execute("SELECT COUNT(*) AS n FROM tb_shop WHERE name = ?", [name])).rows[0] as {
      n: string;
    };
    expect(Number(rows.n)).toBe(1);
    // Stored under a fixed-length hash: neither the client's key nor the credential is in Redis's key space.
    const stored = await t.deps.redis.keys("idem:*");
    expect(stored.length).toBeGreaterThan(0);
    // Records `idem:{caller}:<scope>` and the caller's hourly counter `idem:{caller}:n:<hour>`, hashes only.
    for (const name of stored) expect(name).toMatch(/^idem:\{[0-9a-f]{32}\}:(?:[0-9a-f]{64}|n:\d+)$/);
    // A wrong operator token is refused before the key is looked at.
    const forged = await call(t.app, "POST", "/api/shop", {
      token: "Bearer not-the-token",
      json: { name, typeId, address: "road 1", ...HANGZHOU },
      headers: { "idempotency-key": k },
    });
    expect(forged.status).toBe(401);
    expect(forged.headers.get(REPLAYED)).toBeNull();
  });
});

/**
 * Bursty writes (services/upload-limits.ts): per-user token buckets for uploads and notes, and the
 * per-user daily upload quota — against the real Redis and MySQL, files counted in the blob folder.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Deps } from "../../src/deps.ts";
import { keys } from "../../src/redis/keys.ts";
import { serviceDay } from "../../src/util/time.ts";
import { msToNextServiceDay } from "../../src/services/upload-limits.ts";
import { Faults } from "../support/faults.ts";
import { call } from "../support/http.ts";
import { newShop, newUser, type TestUser } from "../support/social.ts";
import { createTestApp, eventually, type TestApp } from "../support/stack.ts";

const MiB = 1_048_576;

/** A PNG-looking file of exactly `size` bytes (the service sniffs the signature only). */
function png(size: number): Uint8Array {
  const b = new Uint8Array(size);
  b.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  for (let i = 8; i < size; i += 4096) b[i] = i & 0xff;
  return b;
}

const root = mkdtempSync(join(tmpdir(), "cityhub-upload-limits-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

async function appWithStore(
  env: Record<string, string> = {},
  wrap?: (deps: Deps) => Deps,
): Promise<{ t: TestApp; dir: string }> {
  const dir = join(root, crypto.randomUUID(), "uploads");
  mkdirSync(dir, { recursive: true });
  return { t: await createTestApp({ UPLOAD_DIR: dir, ...env }, { wrap }), dir };
}

async function uploadFile(t: TestApp, user: TestUser, bytes: Uint8Array) {
  const form = new FormData();
  form.append("file", new File([bytes as Uint8Array<ArrayBuffer>], "photo.png", { type: "image/png" }));
  return await call<string>(t.app, "POST", "/api/upload/blog", { token: user.token, body: form });
}

function filesUnder(dir: string): string[] {
  return existsSync(dir) ? (readdirSync(dir, { recursive: true }) as string[]).filter((f) => /\.[a-z]+$/.test(f)) : [];
}

async function rowsOf(t: TestApp, userId: number): Promise<number> {
  const row = (await t.deps.db.execute("SELECT COUNT(*) AS n FROM tb_blog_upload WHERE user_id = ?", [userId]))
    .rows[0] as { n: string };
  return Number(row.n);
}

async function quotaUsed(t: TestApp, userId: number): Promise<number> {
  return Number(
    (await t.deps.redis.get(
      keys.uploadQuota(userId, serviceDay(t.deps.clock.now(), t.deps.config.SERVICE_TIME_ZONE)),
    )) ?? 0,
  );
}

describe("upload limits", () => {
  test("the tester's case: 12 × 5 MiB at once from one account store only the bucket's 5; the rest 429 with Retry-After; others unaffected", async () => {
    const { t, dir } = await appWithStore();
    const [user, other] = [await newUser(t), await newUser(t)];
    const file = png(5 * MiB);
    const results = await Promise.all(Array.from({ length: 12 }, () => uploadFile(t, user, file)));
    const stored = results.filter((r) => r.status === 200 && r.body.success);
    const refused = results.filter((r) => r.status === 429);
    expect(stored.length).toBe(5);
    expect(refused.length).toBe(7);
    for (const r of refused) {
      expect(r.body).toMatchObject({ success: false, code: "RATE_LIMITED" });
      expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    }
    expect(filesUnder(dir).length).toBe(5);
    expect(await rowsOf(t, user.id)).toBe(5);
    expect(await quotaUsed(t, user.id)).toBe(5 * 5 * MiB);
    // Another account has its own bucket and quota.
    expect((await uploadFile(t, other, file)).status).toBe(200);
    expect(filesUnder(dir).length).toBe(6);
  }, 60_000);

  test("the daily quota is exact under concurrency: 12 × 5 MiB against 22 MiB store 4; the rest 429 QUOTA_EXCEEDED until the next service day", async () => {
    const { t, dir } = await appWithStore({ UPLOAD_BUCKET_SIZE: "100", UPLOAD_QUOTA_BYTES_PER_DAY: String(22 * MiB) });
    const [user, other] = [await newUser(t), await newUser(t)];
    const results = await Promise.all(Array.from({ length: 12 }, () => uploadFile(t, user, png(5 * MiB))));
    expect(results.filter((r) => r.status === 200).length).toBe(4);
    const over = results.filter((r) => r.status === 429);
    expect(over.length).toBe(8);
    const untilTomorrow = Math.ceil(msToNextServiceDay(Date.now(), t.deps.config.SERVICE_TIME_ZONE) / 1000);
    for (const r of over) {
      expect(r.body).toMatchObject({ success: false, code: "QUOTA_EXCEEDED" });
      const retry = Number(r.headers.get("retry-after"));
      expect(retry).toBeGreaterThanOrEqual(1);
      expect(Math.abs(retry - untilTomorrow)).toBeLessThanOrEqual(5);
    }
    expect(await quotaUsed(t, user.id)).toBe(20 * MiB);
    expect(filesUnder(dir).length).toBe(4);
    // Exactly to the cap: 2 MiB more fits, one byte beyond does not.
    expect((await uploadFile(t, user, png(2 * MiB))).status).toBe(200);
    expect((await uploadFile(t, user, png(64))).body.code).toBe("QUOTA_EXCEEDED");
    expect(await quotaUsed(t, user.id)).toBe(22 * MiB);
    // Deleting an upload does not give its bytes back (the quota bounds bytes written per day).
    const name = results.find((r) => r.status === 200)?.body.data as string;
    expect(
      (await call(t.app, "GET", `/api/upload/blog/delete?name=${encodeURIComponent(name)}`, { token: user.token })).body
        .success,
    ).toBe(true);
    expect(await quotaUsed(t, user.id)).toBe(22 * MiB);
    expect((await uploadFile(t, user, png(64))).body.code).toBe("QUOTA_EXCEEDED");
    // Others are unaffected.
    expect((await uploadFile(t, other, png(5 * MiB))).status).toBe(200);
  }, 60_000);

  test("a failed store or a failed owner row gives the reserved bytes back; nothing is left behind", async () => {
    const faults = new Faults();
    const { t, dir } = await appWithStore(
      { UPLOAD_BUCKET_SIZE: "100", UPLOAD_QUOTA_BYTES_PER_DAY: String(10 * MiB) },
      (deps) => ({
        ...deps,
        db: faults.wrapPort("db", deps.db),
        blobs: faults.wrapPort("blobs", deps.blobs),
      }),
    );
    const user = await newUser(t);
    faults.on("blobs.put", "fail", { times: 2 });
    const failed = await Promise.all([uploadFile(t, user, png(5 * MiB)), uploadFile(t, user, png(5 * MiB))]);
    expect(failed.map((r) => r.status)).toEqual([500, 500]);
    expect(await quotaUsed(t, user.id)).toBe(0);
    faults.on("db.execute", "fail", {
      times: 1,
      when: (args) => String(args[0]).startsWith("INSERT INTO tb_blog_upload"),
    });
    expect((await uploadFile(t, user, png(5 * MiB))).status).toBe(500);
    expect(await quotaUsed(t, user.id)).toBe(0);
    expect(filesUnder(dir)).toEqual([]);
    // The whole quota is still there.
    const ok = await Promise.all([
      uploadFile(t, user, png(5 * MiB)),
      uploadFile(t, user, png(5 * MiB)),
      uploadFile(t, user, png(5 * MiB)),
    ]);
    expect(ok.map((r) => r.status).sort()).toEqual([200, 200, 429]);
    expect(await quotaUsed(t, user.id)).toBe(10 * MiB);
    expect(filesUnder(dir).length).toBe(2);
  }, 60_000);

  test("malformed uploads cost no token: a burst of them leaves the bucket full", async () => {
    const { t } = await appWithStore({ UPLOAD_BUCKET_SIZE: "2" });
    const user = await newUser(t);
    for (let i = 0; i < 5; i++)
      expect((await uploadFile(t, user, new TextEncoder().encode("<html></html>"))).status).toBe(400);
    expect((await uploadFile(t, user, png(64))).status).toBe(200);
    expect((await uploadFile(t, user, png(64))).status).toBe(200);
    expect((await uploadFile(t, user, png(64))).status).toBe(429);
  });
});

describe("note bucket", () => {
  test("a burst of notes beyond NOTE_BUCKET_SIZE is refused with 429 + Retry-After, and the bucket refills", async () => {
    const { t } = await appWithStore({
      NOTE_BUCKET_SIZE: "3",
      NOTE_BUCKET_REFILL: "1",
      NOTE_BUCKET_INTERVAL_MS: "1000",
    });
    const [author, other] = [await newUser(t), await newUser(t)];
    const shopId = await newShop(t);
    const post = (who: TestUser) =>
      call<number>(t.app, "POST", "/api/blog", {
        token: who.token,
        json: { shopId, title: "burst", content: "c", images: "/imgs/blogs/1/2/a.jpg" },
      });
    const burst = await Promise.all(Array.from({ length: 6 }, () => post(author)));
    expect(burst.filter((r) => r.status === 200).length).toBe(3);
    const refused = burst.filter((r) => r.status === 429);
    expect(refused.length).toBe(3);
    for (const r of refused) {
      expect(r.body).toMatchObject({ success: false, code: "RATE_LIMITED" });
      expect(r.headers.get("retry-after")).toBe("1");
    }
    expect(await post(other)).toMatchObject({ status: 200 });
    // Refilled: one token per second (waited on the condition, not a fixed sleep).
    await eventually("the bucket refilled", async () => (await post(author)).status === 200, 10_000, 100);
    const notes = (await t.deps.db.execute("SELECT COUNT(*) AS n FROM tb_blog WHERE user_id = ?", [author.id]))
      .rows[0] as { n: string };
    expect(Number(notes.n)).toBe(4);
  }, 30_000);
});

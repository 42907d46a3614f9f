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
  // Room for every concurrent upload of a test (the in-flight bound is tested on its own below).
  return { t: await createTestApp({ UPLOAD_DIR: dir, UPLOAD_CONCURRENCY: "64", ...env }, { wrap }), dir };
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

  test("a body that was read costs its token, valid image or not; a request refused from its headers alone costs none", async () => {
    const { t } = await appWithStore({ UPLOAD_BUCKET_SIZE: "2", UPLOAD_MAX_BYTES: "4096" });
    const user = await newUser(t);
    const post = (body: BodyInit, headers: Record<string, string>) =>
      call(t.app, "POST", "/api/upload/blog", { token: user.token, body, headers });
    // Refused from the headers: not multipart (415), no boundary (400), a declared length over the cap (413).
    expect((await post("x", { "content-type": "text/plain" })).status).toBe(415);
    expect((await post("x", { "content-type": "multipart/form-data" })).status).toBe(400);
    expect(
      (await post("x", { "content-type": "multipart/form-data; boundary=b", "content-length": "999999" })).status,
    ).toBe(413);
    // Read, then refused for what it holds: one token.
    expect((await uploadFile(t, user, new TextEncoder().encode("<html></html>"))).status).toBe(400);
    expect((await uploadFile(t, user, png(64))).status).toBe(200);
    expect((await uploadFile(t, user, png(64))).status).toBe(429);
  });
});

/**
 * A multipart upload whose body streams: the part's head and the file's first bytes at once, the
 * rest only when the test calls `finish` — until then a read past the first chunk waits (`pulled`
 * counts such reads: 0 means nobody read beyond what was offered up front).
 */
function streamedUpload(t: TestApp, user: TestUser) {
  const boundary = `b${crypto.randomUUID().replaceAll("-", "")}`;
  const enc = new TextEncoder();
  const head = enc.encode(
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.png"\r\nContent-Type: image/png\r\n\r\n`,
  );
  const file = png(64 * 1024);
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const state = { pulled: 0 };
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
      const first = new Uint8Array(head.byteLength + 1024);
      first.set(head);
      first.set(file.subarray(0, 1024), head.byteLength);
      c.enqueue(first);
    },
    pull() {
      state.pulled++;
      return new Promise<void>(() => {});
    },
  });
  const response = call<string>(t.app, "POST", "/api/upload/blog", {
    token: user.token,
    body,
    headers: { "content-type": `multipart/form-data; boundary=${boundary}` },
  });
  return {
    state,
    response,
    finish() {
      controller.enqueue(file.subarray(1024));
      controller.enqueue(enc.encode(`\r\n--${boundary}--\r\n`));
      controller.close();
    },
  };
}

/** The response, or "read" if the body was read past its first chunk before any answer came. */
async function answerUnread(upload: ReturnType<typeof streamedUpload>) {
  let answered = false;
  const read = eventually(
    "the body was read past its first chunk",
    async () => answered || upload.state.pulled > 0,
    10_000,
    5,
  ).then(() => "read" as const);
  const res = await Promise.race([upload.response, read]);
  answered = true;
  return res;
}

describe("uploads refused before the body is read", () => {
  test("over the rate: 429 RATE_LIMITED with Retry-After, the body never read (the stream never ends)", async () => {
    const { t } = await appWithStore({ UPLOAD_BUCKET_SIZE: "1", UPLOAD_BUCKET_INTERVAL_MS: "60000" });
    const user = await newUser(t);
    expect((await uploadFile(t, user, png(64))).status).toBe(200);
    const res = await answerUnread(streamedUpload(t, user));
    if (res === "read") throw new Error("the over-rate upload's body was read");
    expect(res.status).toBe(429);
    expect(res.body).toMatchObject({ success: false, code: "RATE_LIMITED" });
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  }, 30_000);

  test("over the day's quota: 429 QUOTA_EXCEEDED, the body never read", async () => {
    const { t } = await appWithStore({ UPLOAD_BUCKET_SIZE: "100", UPLOAD_QUOTA_BYTES_PER_DAY: "4096" });
    const user = await newUser(t);
    expect((await uploadFile(t, user, png(4096))).status).toBe(200);
    const res = await answerUnread(streamedUpload(t, user));
    if (res === "read") throw new Error("the over-quota upload's body was read");
    expect([res.status, res.body.code]).toEqual([429, "QUOTA_EXCEEDED"]);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  }, 30_000);

  test("beyond UPLOAD_CONCURRENCY uploads in flight: 503 with Retry-After, the body never read; a freed slot admits again", async () => {
    const { t } = await appWithStore({ UPLOAD_BUCKET_SIZE: "100", UPLOAD_CONCURRENCY: "2" });
    const [a, b] = [await newUser(t), await newUser(t)];
    const held = [streamedUpload(t, a), streamedUpload(t, a)];
    await eventually("both uploads admitted and reading", async () => held.every((u) => u.state.pulled > 0));
    const res = await answerUnread(streamedUpload(t, b));
    if (res === "read") throw new Error("the upload beyond the bound was read");
    expect(res.status).toBe(503);
    expect(res.body).toMatchObject({ success: false, code: "UNAVAILABLE" });
    expect(res.headers.get("retry-after")).toBe("1");
    for (const u of held) u.finish();
    for (const u of held) expect((await u.response).status).toBe(200);
    expect((await uploadFile(t, b, png(64))).status).toBe(200);
  }, 30_000);
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

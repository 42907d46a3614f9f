import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { call } from "../support/http.ts";
import { startFakeS3 } from "../support/fake-s3.ts";
import { newUser, type TestUser } from "../support/social.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";

const NAME_RE =
  /^\/blogs\/(\d|1[0-5])\/(\d|1[0-5])\/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.(jpg|png|webp|gif)$/;

const pad = (head: number[], size = 64) => {
  const b = new Uint8Array(size);
  b.set(head);
  for (let i = head.length; i < size; i++) b[i] = (i * 7) & 0xff;
  return b;
};
const ascii = (s: string) => [...s].map((c) => c.charCodeAt(0));
const images = {
  png: pad([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
  jpg: pad([0xff, 0xd8, 0xff, 0xe0]),
  gif: pad(ascii("GIF89a")),
  webp: pad([...ascii("RIFF"), 0x20, 0, 0, 0, ...ascii("WEBPVP8 ")]),
};

const root = mkdtempSync(join(tmpdir(), "cityhub-upload-test-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** An app whose local blob folder is a fresh directory inside `root` (never the developer's .local). */
async function appWithStore(env: Record<string, string> = {}): Promise<{ t: TestApp; dir: string }> {
  const dir = join(root, crypto.randomUUID(), "uploads");
  mkdirSync(dir, { recursive: true });
  return { t: await createTestApp({ UPLOAD_DIR: dir, ...env }), dir };
}

async function uploadFile(
  t: TestApp,
  user: TestUser | null,
  bytes: Uint8Array,
  filename = "photo.png",
  type = "image/png",
) {
  const form = new FormData();
  form.append("file", new File([bytes as Uint8Array<ArrayBuffer>], filename, { type }));
  return await call<string>(t.app, "POST", "/api/upload/blog", { token: user?.token, body: form });
}

const del = (t: TestApp, user: TestUser, name: string) =>
  call(t.app, "GET", `/api/upload/blog/delete?name=${encodeURIComponent(name)}`, { token: user.token });

function filesUnder(dir: string): string[] {
  return existsSync(dir) ? (readdirSync(dir, { recursive: true }) as string[]).filter((f) => /\.[a-z]+$/.test(f)) : [];
}

describe("image uploads", () => {
  test("an upload gets a generated name (never the client's), lands in the store and is served at /imgs with its type", async () => {
    const { t, dir } = await appWithStore();
    const user = await newUser(t);
    const res = await uploadFile(t, user, images.png, "../../../evil.php", "text/html");
    expect(res.body.success).toBe(true);
    const name = res.body.data as string;
    expect(name).toMatch(NAME_RE);
    expect(name.endsWith(".png")).toBe(true);
    expect(readFileSync(join(dir, name))).toEqual(Buffer.from(images.png));
    const row = (
      await t.deps.db.execute("SELECT user_id, content_type, size FROM tb_blog_upload WHERE name = ?", [name.slice(1)])
    ).rows[0] as Record<string, string>;
    expect({ user: Number(row.user_id), type: row.content_type, size: Number(row.size) }).toEqual({
      user: user.id,
      type: "image/png",
      size: images.png.byteLength,
    });

    const served = await t.app.request(`/imgs${name}`);
    expect(served.status).toBe(200);
    expect(served.headers.get("content-type")).toBe("image/png");
    expect(served.headers.get("cache-control")).toContain("immutable");
    expect(new Uint8Array(await served.arrayBuffer())).toEqual(images.png);
  });

  test("JPEG, PNG, WebP and GIF are recognised by their bytes, whatever type the client declares", async () => {
    const { t } = await appWithStore();
    const user = await newUser(t);
    for (const [ext, bytes] of Object.entries(images)) {
      const res = await uploadFile(t, user, bytes, "x.bin", "application/octet-stream");
      expect(res.body.data, ext).toMatch(new RegExp(`\\.${ext}$`));
      const served = await t.app.request(`/imgs${res.body.data}`);
      expect(served.headers.get("content-type")).toBe(ext === "jpg" ? "image/jpeg" : `image/${ext}`);
    }
  });

  test("anything else is refused with a 400 envelope (415 for a body that is not multipart) and nothing is stored", async () => {
    // Each refused body that was read costs its upload token (tests/routes/upload-limits.test.ts): a bucket for them all.
    const { t, dir } = await appWithStore({ UPLOAD_BUCKET_SIZE: "100" });
    const user = await newUser(t);
    const html = new TextEncoder().encode("<html><script>alert(1)</script></html>");
    const svg = new TextEncoder().encode('<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>');
    for (const [bytes, type] of [
      [html, "image/png"],
      [svg, "image/svg+xml"],
      [new Uint8Array(0), "image/png"],
      [images.png.slice(0, 4), "image/png"],
    ] as const) {
      const res = await uploadFile(t, user, bytes, "a.png", type);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ success: false, code: "INVALID_INPUT" });
    }
    const noFile = new FormData();
    noFile.append("file", "just text");
    for (const body of [noFile, new FormData()]) {
      const res = await call(t.app, "POST", "/api/upload/blog", { token: user.token, body });
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ success: false, code: "INVALID_INPUT" });
    }
    // Not multipart at all: refused for its type before it is read (tests/http/content-types.test.ts).
    const text = await call(t.app, "POST", "/api/upload/blog", {
      token: user.token,
      body: "not multipart",
      headers: { "content-type": "text/plain" },
    });
    expect([text.status, text.body.code]).toEqual([415, "UNSUPPORTED_MEDIA_TYPE"]);
    expect(filesUnder(dir)).toEqual([]);
  });

  test("the size limit is UPLOAD_MAX_BYTES (413), independent of the general body limit", async () => {
    const { t, dir } = await appWithStore({ UPLOAD_MAX_BYTES: "4096", MAX_BODY_BYTES: "1024" });
    const user = await newUser(t);
    // Over the general 1 KiB limit but within the upload limit: accepted.
    expect((await uploadFile(t, user, pad([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 3000))).body.success).toBe(
      true,
    );
    // Just over the upload limit (the body fits the framing allowance): refused after parsing.
    const over = await uploadFile(t, user, pad([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 4097));
    expect(over.status).toBe(413);
    expect(over.body).toMatchObject({ success: false, code: "PAYLOAD_TOO_LARGE" });
    // Far over: cut off while streaming the body.
    const huge = await uploadFile(t, user, pad([0xff, 0xd8, 0xff], 200_000));
    expect(huge.status).toBe(413);
    expect(filesUnder(dir).length).toBe(1);
  });

  test("only the uploader may delete an upload; afterwards it is gone from the store and from /imgs", async () => {
    const { t, dir } = await appWithStore();
    const owner = await newUser(t);
    const other = await newUser(t);
    const name = (await uploadFile(t, owner, images.jpg)).body.data as string;
    const forbidden = await del(t, other, name);
    expect(forbidden.status).toBe(403);
    expect(forbidden.body).toMatchObject({ success: false, code: "FORBIDDEN" });
    expect(existsSync(join(dir, name))).toBe(true);

    // The front-end may send the displayed path (/imgs/blogs/…) too.
    expect((await del(t, owner, `/imgs${name}`)).body).toEqual({ success: true });
    expect(existsSync(join(dir, name))).toBe(false);
    const gone = await call(t.app, "GET", `/imgs${name}`);
    expect(gone.status).toBe(404);
    expect(gone.body).toMatchObject({ success: false, code: "NOT_FOUND" });
    expect((await del(t, owner, name)).body).toEqual({
      success: false,
      code: "NOT_FOUND",
      errorMsg: "upload not found",
    });
    // A well-formed name nobody uploaded.
    expect((await del(t, owner, `/blogs/1/2/${crypto.randomUUID()}.png`)).body).toMatchObject({
      success: false,
      code: "NOT_FOUND",
    });
  });

  test("delete names that could leave the store are rejected and touch nothing (classic path-traversal regression)", async () => {
    const { t, dir } = await appWithStore();
    const user = await newUser(t);
    const name = (await uploadFile(t, user, images.png)).body.data as string;
    const canary = join(dir, "..", "canary.txt");
    writeFileSync(canary, "keep me");
    writeFileSync(join(dir, "inside.txt"), "keep me too");
    const attacks = [
      "../canary.txt",
      "/../canary.txt",
      "/blogs/../../canary.txt",
      `${name}/../../../../canary.txt`,
      "/blogs/1/2/../../../canary.txt",
      "%2e%2e/canary.txt",
      "/blogs/%2e%2e/%2e%2e/canary.txt",
      "..%2fcanary.txt",
      "..\\canary.txt",
      "/blogs\\..\\..\\canary.txt",
      `${canary}`,
      "/etc/passwd",
      "/inside.txt",
      "inside.txt",
      name.slice(1),
      `${name}\u0000.png`,
      "/blogs",
      "/blogs/1/2",
    ];
    for (const attack of attacks) {
      const res = await del(t, user, attack);
      expect(res.status, attack).toBe(400);
      expect(res.body).toMatchObject({ success: false, code: "INVALID_INPUT" });
    }
    expect(readFileSync(canary, "utf8")).toBe("keep me");
    expect(readFileSync(join(dir, "inside.txt"), "utf8")).toBe("keep me too");
    expect(existsSync(join(dir, name))).toBe(true);
    // Nor can /imgs read outside the generated names.
    for (const path of [
      "/imgs/blogs/%2e%2e/%2e%2e/canary.txt",
      "/imgs/blogs/..%2f..%2fcanary.txt",
      "/imgs/blogs/inside.txt",
      "/imgs/blogs/1/2/x.png",
    ]) {
      const res = await t.app.request(path);
      expect(res.status, path).toBe(404);
    }
  });

  test("upload routes need a login", async () => {
    const { t } = await appWithStore();
    expect((await uploadFile(t, null, images.png)).status).toBe(401);
    expect((await call(t.app, "GET", "/api/upload/blog/delete?name=/blogs/1/2/x.png")).status).toBe(401);
    const user = await newUser(t);
    expect((await call(t.app, "GET", "/api/upload/blog/delete", { token: user.token })).status).toBe(400);
  });

  test("with BLOB_STORE=s3 the same routes store, serve and delete through an S3-compatible bucket", async () => {
    const fake = startFakeS3({ bucket: "cityhub-test" });
    try {
      const t = await createTestApp({
        BLOB_STORE: "s3",
        S3_ENDPOINT: fake.url,
        S3_BUCKET: fake.bucket,
        S3_REGION: fake.region,
        S3_ACCESS_KEY_ID: fake.accessKeyId,
        S3_SECRET_ACCESS_KEY: fake.secretAccessKey,
      });
      const user = await newUser(t);
      const name = (await uploadFile(t, user, images.webp)).body.data as string;
      expect(name).toMatch(NAME_RE);
      expect(fake.objects.get(name.slice(1))?.contentType).toBe("image/webp");
      const served = await t.app.request(`/imgs${name}`);
      expect(served.headers.get("content-type")).toBe("image/webp");
      expect(new Uint8Array(await served.arrayBuffer())).toEqual(images.webp);
      expect((await del(t, user, name)).body).toEqual({ success: true });
      expect(fake.objects.has(name.slice(1))).toBe(false);
      expect((await t.app.request(`/imgs${name}`)).status).toBe(404);
    } finally {
      await fake.stop();
    }
  });
});

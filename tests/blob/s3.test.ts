import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalFolderBlobStore } from "../../src/blob/local.ts";
import { S3BlobStore, sha256Hex, signV4 } from "../../src/blob/s3.ts";
import { BlobKeyError, BlobStoreError } from "../../src/blob/store.ts";
import { startFakeS3 } from "../support/fake-s3.ts";

const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 1, 2, 3, 4]);
const unsafeKeys = ["../x", "a/../../x", "/etc/passwd", "a//b", "a\\..\\b", "a/%2e%2e/b", "./a", "a/.", "", "a\u0000b"];

async function bytesOf(body: ReadableStream<Uint8Array> | Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await new Response(body as BodyInit).arrayBuffer());
}

describe("SigV4 signing", () => {
  test("matches AWS's published example (GET /test.txt on examplebucket, 2013-05-24)", async () => {
    const res = await signV4({
      method: "GET",
      url: new URL("https://examplebucket.s3.amazonaws.com/test.txt"),
      headers: { range: "bytes=0-9", "x-amz-content-sha256": await sha256Hex(""), "x-amz-date": "20130524T000000Z" },
      payloadHash: await sha256Hex(""),
      accessKeyId: "AKIAIOSFODNN7EXAMPLE",
      secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
      region: "us-east-1",
      service: "s3",
      amzDate: "20130524T000000Z",
    });
    expect(res.authorization).toBe(
      "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
    );
  });
});

describe("S3BlobStore against an S3-compatible endpoint", () => {
  const fake = startFakeS3();
  afterAll(() => fake.stop());
  const store = (secret = fake.secretAccessKey) =>
    new S3BlobStore({
      endpoint: fake.url,
      bucket: fake.bucket,
      region: fake.region,
      accessKeyId: fake.accessKeyId,
      secretAccessKey: secret,
      pathStyle: true,
    });

  test("put, head, get and delete round-trip an object with its content type", async () => {
    const s = store();
    const key = `blogs/3/12/${crypto.randomUUID()}.png`;
    await s.put(key, png, { contentType: "image/png" });
    expect(fake.objects.get(key)?.contentType).toBe("image/png");
    expect(await s.head(key)).toEqual({ contentType: "image/png", size: png.byteLength });
    const got = await s.get(key);
    expect(got?.contentType).toBe("image/png");
    expect(await bytesOf(got?.body ?? new Uint8Array())).toEqual(png);
    await s.delete(key);
    expect(await s.get(key)).toBeNull();
    expect(await s.head(key)).toBeNull();
    // Deleting again is not an error.
    await s.delete(key);
  });

  test("keys with spaces and non-ASCII characters are encoded the way SigV4 signs them", async () => {
    const s = store();
    const key = `odd/名字 with space+plus~${crypto.randomUUID()}.gif`;
    await s.put(key, png, { contentType: "image/gif" });
    expect(fake.objects.has(key)).toBe(true);
    expect((await s.head(key))?.size).toBe(png.byteLength);
  });

  test("a wrong secret is refused by the store and surfaces as BlobStoreError 403", async () => {
    const err = await store("not-the-secret")
      .put(`blogs/1/1/${crypto.randomUUID()}.png`, png, { contentType: "image/png" })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BlobStoreError);
    expect((err as BlobStoreError).status).toBe(403);
    expect((err as Error).message).toContain("SignatureDoesNotMatch");
  });

  test("unsafe keys are refused before any request is sent", async () => {
    const s = store();
    const before = fake.log.length;
    for (const key of unsafeKeys) {
      await expect(s.put(key, png, { contentType: "image/png" })).rejects.toBeInstanceOf(BlobKeyError);
      await expect(s.delete(key)).rejects.toBeInstanceOf(BlobKeyError);
    }
    expect(fake.log.length).toBe(before);
  });

  test("virtual-hosted style puts the bucket in the host name", () => {
    const s = new S3BlobStore({
      endpoint: "https://s3.eu-west-1.amazonaws.com",
      bucket: "pics",
      region: "eu-west-1",
      accessKeyId: "a",
      secretAccessKey: "b",
      pathStyle: false,
    });
    expect(s.urlOf("blogs/1/2/x.png").href).toBe("https://pics.s3.eu-west-1.amazonaws.com/blogs/1/2/x.png");
    const r2 = new S3BlobStore({
      endpoint: "https://acc.r2.cloudflarestorage.com",
      bucket: "pics",
      region: "auto",
      accessKeyId: "a",
      secretAccessKey: "b",
      pathStyle: true,
    });
    expect(r2.urlOf("blogs/1/2/x.png").href).toBe("https://acc.r2.cloudflarestorage.com/pics/blogs/1/2/x.png");
  });
});

describe("LocalFolderBlobStore", () => {
  const dir = mkdtempSync(join(tmpdir(), "cityhub-blobs-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test("round-trips files under its root, content type from the extension", async () => {
    const s = new LocalFolderBlobStore(join(dir, "root"));
    await s.put("blogs/1/2/a.png", png, { contentType: "image/png" });
    expect(readFileSync(join(dir, "root", "blogs/1/2/a.png"))).toEqual(Buffer.from(png));
    const got = await s.get("blogs/1/2/a.png");
    expect(got?.contentType).toBe("image/png");
    expect(await bytesOf(got?.body ?? new Uint8Array())).toEqual(png);
    expect(await s.head("blogs/1/2/a.png")).toEqual({ contentType: "image/png", size: png.byteLength });
    await s.delete("blogs/1/2/a.png");
    expect(await s.get("blogs/1/2/a.png")).toBeNull();
    await s.delete("blogs/1/2/a.png");
  });

  test("refuses every key that could escape the root, and never deletes a folder", async () => {
    const s = new LocalFolderBlobStore(join(dir, "root2"));
    const canary = join(dir, "canary.txt");
    writeFileSync(canary, "keep me");
    for (const key of [...unsafeKeys, "../canary.txt", "blogs/../../canary.txt"]) {
      await expect(s.get(key)).rejects.toBeInstanceOf(BlobKeyError);
      await expect(s.delete(key)).rejects.toBeInstanceOf(BlobKeyError);
      await expect(s.put(key, png, { contentType: "image/png" })).rejects.toBeInstanceOf(BlobKeyError);
    }
    await s.put("blogs/1/1/b.png", png, { contentType: "image/png" });
    await s.delete("blogs");
    expect(await s.head("blogs/1/1/b.png")).not.toBeNull();
    expect(readFileSync(canary, "utf8")).toBe("keep me");
  });
});

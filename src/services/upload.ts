/**
 * Note images: upload, owner-only delete, and reads for /imgs/*.
 *
 * The classic service wrote the client's file name under a web root and deleted whatever path it
 * was given (`../` included). Here names are generated (`/blogs/{0-15}/{0-15}/{uuid}.{ext}`, the
 * extension of the type sniffed from the bytes, never the client's name or declared type), every
 * name a client sends back must match that exact shape, the uploader is recorded in
 * tb_blog_upload, and only the uploader may delete. The blob store refuses unsafe keys on its own
 * as a second line (src/blob/store.ts).
 */
import type { BlobObject } from "../blob/index.ts";
import type { Deps } from "../deps.ts";
import { type Refusal, reserveUploadQuota } from "./upload-limits.ts";

/** Accepted image types by magic bytes → extension. */
const TYPES = {
  "image/jpeg": "jpg",
  "image/png": "png",
  "image/webp": "webp",
  "image/gif": "gif",
} as const;
export type ImageType = keyof typeof TYPES;

const startsWith = (b: Uint8Array, sig: number[], at = 0) => sig.every((x, i) => b[at + i] === x);
const ascii = (s: string) => [...s].map((c) => c.charCodeAt(0));

/** The image type the bytes really are, or null (declared types are not trusted). */
export function sniffImage(b: Uint8Array): ImageType | null {
  if (startsWith(b, [0xff, 0xd8, 0xff])) return "image/jpeg";
  if (startsWith(b, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return "image/png";
  if (startsWith(b, ascii("GIF87a")) || startsWith(b, ascii("GIF89a"))) return "image/gif";
  if (startsWith(b, ascii("RIFF")) && startsWith(b, ascii("WEBP"), 8)) return "image/webp";
  return null;
}

/** The only names we hand out (and so the only ones we accept back). */
const NAME_RE =
  /^\/blogs\/(?:[0-9]|1[0-5])\/(?:[0-9]|1[0-5])\/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.(?:jpg|png|webp|gif)$/;

/**
 * Store key of a name the client sent back (`/blogs/…`, or `/imgs/blogs/…` as the front-end
 * displays it), or null when it is not exactly a name we generate: `..`, `%2e`, absolute paths,
 * backslashes and anything else fail the pattern.
 */
export function keyOfName(name: string): string | null {
  const n = name.startsWith("/imgs/") ? name.slice("/imgs".length) : name;
  return NAME_RE.test(n) ? n.slice(1) : null;
}

function newName(ext: string): string {
  const [r = 0] = crypto.getRandomValues(new Uint8Array(1));
  // Two levels of 16 folders, as the classic layout, so no folder grows without bound.
  return `/blogs/${r & 0xf}/${(r >> 4) & 0xf}/${crypto.randomUUID()}.${ext}`;
}

export type UploadOutcome =
  | { ok: true; name: string }
  | { ok: false; reason: "EMPTY" | "TOO_LARGE" | "UNSUPPORTED_TYPE" }
  | ({ ok: false } & Refusal);

/**
 * Stores an image for `userId` (admitted by upload-limits.ts admitUpload: rate and quota checked
 * before its body was read); returns its public name (`/blogs/…`, served at `/imgs/blogs/…`).
 */
export async function saveBlogImage(deps: Deps, userId: number, bytes: Uint8Array): Promise<UploadOutcome> {
  if (bytes.byteLength === 0) return { ok: false, reason: "EMPTY" };
  if (bytes.byteLength > deps.config.UPLOAD_MAX_BYTES) return { ok: false, reason: "TOO_LARGE" };
  const type = sniffImage(bytes);
  if (!type) return { ok: false, reason: "UNSUPPORTED_TYPE" };
  // The user's upload token was taken before the body was read (routes/upload.ts admitUpload);
  // now the day's exact byte quota, reserved before anything is written.
  const hold = await reserveUploadQuota(deps, userId, bytes.byteLength);
  if ("reason" in hold) return { ok: false, ...hold };
  // Whatever fails from here gives the bytes back (if the refund itself fails, they stay counted
  // for the day: over-counting, never under; the same if the process dies before the refund).
  const refund = () =>
    hold.refund().catch((e: unknown) => deps.log.warn("upload quota not refunded", { err: e, userId }));
  const name = newName(TYPES[type]);
  const key = name.slice(1);
  try {
    await deps.blobs.put(key, bytes, { contentType: type });
  } catch (err) {
    await refund();
    throw err;
  }
  try {
    await deps.db.execute("INSERT INTO tb_blog_upload (name, user_id, content_type, size) VALUES (?, ?, ?, ?)", [
      key,
      userId,
      type,
      bytes.byteLength,
    ]);
  } catch (err) {
    // Without an owner row nobody could delete the file: remove it again (best effort) and fail.
    await deps.blobs.delete(key).catch((e: unknown) => deps.log.warn("orphan upload not removed", { err: e, key }));
    await refund();
    throw err;
  }
  return { ok: true, name };
}

export type DeleteOutcome = { ok: true } | { ok: false; reason: "NOT_FOUND" | "FORBIDDEN" };

/**
 * Deletes the caller's own upload. Deleting does not give its bytes back to the day's quota: the
 * quota bounds the bytes written per day (store traffic, disk churn), and a refund would let an
 * upload–delete loop write without bound. Blob first, then the ownership row: if the row delete fails
 * the row survives and a retry finishes the job (deleting a missing blob is a no-op).
 */
export async function deleteBlogImage(deps: Deps, userId: number, key: string): Promise<DeleteOutcome> {
  const row = (await deps.db.execute("SELECT user_id FROM tb_blog_upload WHERE name = ?", [key])).rows[0] as
    | { user_id: string | number }
    | undefined;
  if (!row) return { ok: false, reason: "NOT_FOUND" };
  if (Number(row.user_id) !== userId) return { ok: false, reason: "FORBIDDEN" };
  await deps.blobs.delete(key);
  await deps.db.execute("DELETE FROM tb_blog_upload WHERE name = ? AND user_id = ?", [key, userId]);
  return { ok: true };
}

/** An uploaded image by store key (`blogs/…`), or null. */
export async function readBlogImage(deps: Deps, key: string): Promise<BlobObject | null> {
  return await deps.blobs.get(key);
}

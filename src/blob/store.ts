/**
 * The blob-store port: where uploaded images live. Adapters: `LocalFolderBlobStore` (dev, a folder
 * on disk) and `S3BlobStore` (production: Cloudflare R2, AWS S3 or any S3-compatible store, over
 * fetch + SigV4, so it runs unchanged on Workers, Bun and Deno).
 *
 * Keys are relative, `/`-separated paths (`blogs/7/14/<uuid>.jpg`). Every adapter refuses a key
 * that could name something outside its store (`..`, absolute, backslashes, control characters),
 * whatever the caller validated before: the store is the last line against path traversal.
 */

export interface BlobMeta {
  contentType: string;
  /** Bytes. */
  size: number;
}

export interface BlobObject extends BlobMeta {
  body: ReadableStream<Uint8Array> | Uint8Array;
}

export interface BlobStore {
  /** Writes (or replaces) the object. */
  put(key: string, body: Uint8Array, opts: { contentType: string }): Promise<void>;
  /** The object, or null when it does not exist. */
  get(key: string): Promise<BlobObject | null>;
  head(key: string): Promise<BlobMeta | null>;
  /** Removes the object; removing a missing object is not an error (idempotent). */
  delete(key: string): Promise<void>;
}

/** A key the store refuses (it would escape the store or is not a plain relative path). */
export class BlobKeyError extends Error {
  constructor(key: string) {
    super(`invalid blob key: ${JSON.stringify(key.slice(0, 200))}`);
    this.name = "BlobKeyError";
  }
}

/** The store answered with a failure (network, permissions, 5xx). */
export class BlobStoreError extends Error {
  constructor(
    message: string,
    readonly status?: number,
  ) {
    super(message);
    this.name = "BlobStoreError";
  }
}

/** Max key length, characters (S3 allows 1024 bytes; ours are ~60). */
const MAX_KEY = 512;

/**
 * Throws `BlobKeyError` unless `key` is a relative path of non-empty segments, none of them `.` or
 * `..`, with no backslash, `%` (so no encoded traversal can be decoded later) or control character.
 */
export function assertSafeKey(key: string): void {
  if (typeof key !== "string" || key.length === 0 || key.length > MAX_KEY) throw new BlobKeyError(String(key));
  if (/[\\%\u0000-\u001f\u007f]/.test(key) || key.startsWith("/")) throw new BlobKeyError(key);
  for (const seg of key.split("/")) {
    if (seg === "" || seg === "." || seg === "..") throw new BlobKeyError(key);
  }
}

/** Content types by extension, for stores that keep none (the local folder). */
export const contentTypeByExt: Record<string, string> = {
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  png: "image/png",
  webp: "image/webp",
  gif: "image/gif",
};

export function contentTypeOf(key: string): string {
  const ext = /\.([a-z0-9]+)$/i.exec(key)?.[1]?.toLowerCase() ?? "";
  return contentTypeByExt[ext] ?? "application/octet-stream";
}

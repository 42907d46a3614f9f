/**
 * Dev blob store: a folder on disk (default `.local/uploads`). The content type is derived from
 * the key's extension (our keys always carry the extension of the sniffed type), so no sidecar
 * metadata is needed.
 *
 * Writes go to a temporary file that is renamed into place, so a reader never sees half an image.
 * Every key is checked twice: syntactically (`assertSafeKey`) and by resolving it and requiring the
 * result to stay under the root.
 */
import { mkdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { dirname, resolve, sep } from "node:path";
import { assertSafeKey, BlobKeyError, type BlobMeta, type BlobObject, type BlobStore, contentTypeOf } from "./store.ts";

function isMissing(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === "ENOENT" || code === "ENOTDIR";
}

export class LocalFolderBlobStore implements BlobStore {
  /** Absolute root folder. Created on first write. */
  readonly root: string;

  constructor(root: string) {
    this.root = resolve(root);
  }

  /** Absolute path of `key`, or BlobKeyError when it is unsafe or resolves outside the root. */
  pathOf(key: string): string {
    assertSafeKey(key);
    const path = resolve(this.root, key);
    if (!path.startsWith(this.root + sep)) throw new BlobKeyError(key);
    return path;
  }

  async put(key: string, body: Uint8Array, _opts: { contentType: string }): Promise<void> {
    const path = this.pathOf(key);
    await mkdir(dirname(path), { recursive: true });
    const tmp = `${path}.${crypto.randomUUID()}.tmp`;
    try {
      await writeFile(tmp, body);
      await rename(tmp, path);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
  }

  async get(key: string): Promise<BlobObject | null> {
    const path = this.pathOf(key);
    try {
      const body = new Uint8Array(await readFile(path));
      return { body, size: body.byteLength, contentType: contentTypeOf(key) };
    } catch (err) {
      if (isMissing(err) || (err as { code?: unknown }).code === "EISDIR") return null;
      throw err;
    }
  }

  async head(key: string): Promise<BlobMeta | null> {
    const path = this.pathOf(key);
    try {
      const s = await stat(path);
      return s.isFile() ? { size: s.size, contentType: contentTypeOf(key) } : null;
    } catch (err) {
      if (isMissing(err)) return null;
      throw err;
    }
  }

  async delete(key: string): Promise<void> {
    const path = this.pathOf(key);
    const s = await stat(path).catch((err: unknown) => {
      if (isMissing(err)) return null;
      throw err;
    });
    // Only files: a key naming a folder (e.g. "blogs") must never remove a subtree.
    if (s?.isFile()) await rm(path, { force: true });
  }
}

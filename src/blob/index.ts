/** Builds the configured blob store (BLOB_STORE): a local folder in dev, S3-compatible in production. */
import type { Config } from "../env.ts";
import { LocalFolderBlobStore } from "./local.ts";
import { S3BlobStore } from "./s3.ts";
import type { BlobStore } from "./store.ts";

export type { BlobMeta, BlobObject, BlobStore } from "./store.ts";
export { BlobKeyError, BlobStoreError } from "./store.ts";

export function createBlobStore(config: Config, fetchImpl?: typeof fetch): BlobStore {
  if (config.BLOB_STORE === "s3") {
    // parseEnv guarantees these when BLOB_STORE=s3.
    return new S3BlobStore({
      endpoint: config.S3_ENDPOINT ?? "",
      bucket: config.S3_BUCKET ?? "",
      region: config.S3_REGION,
      accessKeyId: config.S3_ACCESS_KEY_ID ?? "",
      secretAccessKey: config.S3_SECRET_ACCESS_KEY ?? "",
      pathStyle: config.S3_PATH_STYLE,
      fetch: fetchImpl,
    });
  }
  return new LocalFolderBlobStore(config.UPLOAD_DIR);
}

/**
 * Production blob store: any S3-compatible object store — Cloudflare R2 (region `auto`), AWS S3,
 * MinIO — spoken over plain `fetch` with AWS Signature Version 4, so the same code runs on
 * Workers, Bun and Deno without an SDK (the AWS SDK is large and Node-flavoured).
 *
 * Only single-request object operations are used (PUT, GET, HEAD, DELETE); uploads are small
 * images, so no multipart upload. The payload hash is always signed (no UNSIGNED-PAYLOAD), which
 * makes the store reject a body altered in transit.
 */
import { assertSafeKey, type BlobMeta, type BlobObject, type BlobStore, BlobStoreError } from "./store.ts";
import { hex, hmacSha256, sha256Hex } from "../util/crypto.ts";

export interface S3Options {
  /** `https://<account>.r2.cloudflarestorage.com`, `https://s3.eu-west-1.amazonaws.com`, … */
  endpoint: string;
  bucket: string;
  /** SigV4 region (`auto` for R2). */
  region: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** true: `<endpoint>/<bucket>/<key>`; false: `<bucket>.<endpoint host>/<key>`. */
  pathStyle: boolean;
  fetch?: typeof fetch;
  /** Signing time source, epoch ms (tests). */
  now?: () => number;
}

const enc = new TextEncoder();

export { sha256Hex };
const hmac = hmacSha256;

/** RFC 3986 encoding as SigV4 wants it: everything but `A-Za-z0-9-_.~` (and `/` in paths). */
export function uriEncode(s: string, keepSlash: boolean): string {
  let out = "";
  for (const byte of enc.encode(s)) {
    const ch = String.fromCharCode(byte);
    if (/[A-Za-z0-9\-_.~]/.test(ch) || (keepSlash && ch === "/")) out += ch;
    else out += `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/** `20130524T000000Z` and `20130524` of an instant. */
export function amzDates(ms: number): { amzDate: string; day: string } {
  const iso = new Date(ms)
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d{3}/, "");
  return { amzDate: iso, day: iso.slice(0, 8) };
}

export interface SignInput {
  method: string;
  url: URL;
  /** Headers to sign (any case); must include `x-amz-date` and `x-amz-content-sha256`. `host` is added from the URL. */
  headers: Record<string, string>;
  payloadHash: string;
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
  service: string;
  amzDate: string;
}

/**
 * The SigV4 `Authorization` header for a request (header-based signing). Exported for the
 * published AWS test vector in tests/blob/s3.test.ts.
 */
export async function signV4(
  input: SignInput,
): Promise<{ authorization: string; signature: string; signedHeaders: string }> {
  const headers = new Map<string, string>();
  headers.set("host", input.url.host);
  for (const [k, v] of Object.entries(input.headers)) headers.set(k.toLowerCase(), v.trim().replace(/\s+/g, " "));
  const names = [...headers.keys()].sort();
  const signedHeaders = names.join(";");
  const canonicalHeaders = names.map((n) => `${n}:${headers.get(n)}\n`).join("");
  const query = [...input.url.searchParams.entries()]
    .map(([k, v]) => [uriEncode(k, false), uriEncode(v, false)] as const)
    .sort((a, b) => (a[0] === b[0] ? (a[1] < b[1] ? -1 : 1) : a[0] < b[0] ? -1 : 1))
    .map(([k, v]) => `${k}=${v}`)
    .join("&");
  // S3 signs the path as sent (already encoded once); other services would normalise it again.
  const canonicalRequest = [
    input.method,
    input.url.pathname || "/",
    query,
    canonicalHeaders,
    signedHeaders,
    input.payloadHash,
  ].join("\n");
  const day = input.amzDate.slice(0, 8);
  const scope = `${day}/${input.region}/${input.service}/aws4_request`;
  const stringToSign = ["AWS4-HMAC-SHA256", input.amzDate, scope, await sha256Hex(canonicalRequest)].join("\n");
  let key = await hmac(enc.encode(`AWS4${input.secretAccessKey}`), day);
  key = await hmac(key, input.region);
  key = await hmac(key, input.service);
  key = await hmac(key, "aws4_request");
  const signature = hex(await hmac(key, stringToSign));
  return {
    signature,
    signedHeaders,
    authorization: `AWS4-HMAC-SHA256 Credential=${input.accessKeyId}/${scope},SignedHeaders=${signedHeaders},Signature=${signature}`,
  };
}

const EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

export class S3BlobStore implements BlobStore {
  private readonly base: URL;
  private readonly fetch: (url: URL, init: RequestInit) => Promise<Response>;
  private readonly now: () => number;

  constructor(private readonly opts: S3Options) {
    const endpoint = new URL(opts.endpoint);
    this.base = opts.pathStyle
      ? new URL(`${endpoint.origin}${endpoint.pathname.replace(/\/$/, "")}/${uriEncode(opts.bucket, false)}/`)
      : new URL(`${endpoint.protocol}//${opts.bucket}.${endpoint.host}${endpoint.pathname.replace(/\/$/, "")}/`);
    this.fetch = opts.fetch ?? ((url, init) => fetch(url, init));
    this.now = opts.now ?? Date.now;
  }

  /** Object URL; the key is validated, then encoded segment by segment. */
  urlOf(key: string): URL {
    assertSafeKey(key);
    return new URL(this.base.href + uriEncode(key, true));
  }

  private async send(
    method: string,
    key: string,
    body?: Uint8Array,
    extra: Record<string, string> = {},
  ): Promise<Response> {
    const url = this.urlOf(key);
    const payloadHash = body ? await sha256Hex(body) : EMPTY_SHA256;
    const { amzDate } = amzDates(this.now());
    const headers: Record<string, string> = { ...extra, "x-amz-date": amzDate, "x-amz-content-sha256": payloadHash };
    const { authorization } = await signV4({
      method,
      url,
      headers,
      payloadHash,
      accessKeyId: this.opts.accessKeyId,
      secretAccessKey: this.opts.secretAccessKey,
      region: this.opts.region,
      service: "s3",
      amzDate,
    });
    try {
      return await this.fetch(url, {
        method,
        headers: { ...headers, authorization },
        body: body as Uint8Array<ArrayBuffer> | undefined,
      });
    } catch (err) {
      throw new BlobStoreError(`${method} ${key}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  private async failure(method: string, key: string, res: Response): Promise<BlobStoreError> {
    const text = await res.text().catch(() => "");
    const code = /<Code>([^<]*)<\/Code>/.exec(text)?.[1] ?? "";
    return new BlobStoreError(`${method} ${key}: ${res.status}${code ? ` ${code}` : ""}`, res.status);
  }

  async put(key: string, body: Uint8Array, opts: { contentType: string }): Promise<void> {
    const res = await this.send("PUT", key, body, { "content-type": opts.contentType });
    if (!res.ok) throw await this.failure("PUT", key, res);
    await res.body?.cancel();
  }

  async get(key: string): Promise<BlobObject | null> {
    const res = await this.send("GET", key);
    if (res.status === 404) {
      await res.body?.cancel();
      return null;
    }
    if (!res.ok || !res.body) throw await this.failure("GET", key, res);
    return {
      body: res.body,
      contentType: res.headers.get("content-type") ?? "application/octet-stream",
      size: Number(res.headers.get("content-length") ?? 0),
    };
  }

  async head(key: string): Promise<BlobMeta | null> {
    const res = await this.send("HEAD", key);
    if (res.status === 404) return null;
    if (!res.ok) throw new BlobStoreError(`HEAD ${key}: ${res.status}`, res.status);
    return {
      contentType: res.headers.get("content-type") ?? "application/octet-stream",
      size: Number(res.headers.get("content-length") ?? 0),
    };
  }

  async delete(key: string): Promise<void> {
    const res = await this.send("DELETE", key);
    // S3 answers 204 for a missing key too; some compatible stores answer 404. Both mean "gone".
    if (!res.ok && res.status !== 404) throw await this.failure("DELETE", key, res);
    await res.body?.cancel();
  }
}

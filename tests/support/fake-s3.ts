/**
 * A small S3-compatible object server for tests (path-style `/<bucket>/<key>`): PUT, GET, HEAD,
 * DELETE on objects held in memory. It verifies every request's SigV4 `Authorization` header with
 * its own implementation (node:crypto, written independently of src/blob/s3.ts), checks the
 * payload hash against the body, and answers S3's XML errors (403 SignatureDoesNotMatch, 404
 * NoSuchKey), so the adapter is exercised against the protocol, not against itself.
 */
import { createHash, createHmac } from "node:crypto";

export interface FakeS3 {
  url: string;
  bucket: string;
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
  objects: Map<string, { body: Uint8Array; contentType: string }>;
  /** Requests seen, for assertions: method + decoded key. */
  log: { method: string; key: string; status: number }[];
  stop(): Promise<void>;
}

const sha256 = (data: Uint8Array | string) => createHash("sha256").update(data).digest("hex");
const hmac = (key: Buffer | string, data: string) => createHmac("sha256", key).update(data).digest();

function xmlError(status: number, code: string): Response {
  return new Response(
    `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${code}</Message></Error>`,
    {
      status,
      headers: { "content-type": "application/xml" },
    },
  );
}

function expectedSignature(
  req: Request,
  url: URL,
  signedHeaders: string[],
  secret: string,
  region: string,
  payloadHash: string,
): string {
  const amzDate = req.headers.get("x-amz-date") ?? "";
  const canonicalHeaders = signedHeaders
    .map((h) => `${h}:${(h === "host" ? url.host : (req.headers.get(h) ?? "")).trim()}\n`)
    .join("");
  const canonicalQuery = [...url.searchParams.entries()]
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`)
    .sort()
    .join("&");
  const canonical = [
    req.method,
    url.pathname,
    canonicalQuery,
    canonicalHeaders,
    signedHeaders.join(";"),
    payloadHash,
  ].join("\n");
  const day = amzDate.slice(0, 8);
  const scope = `${day}/${region}/s3/aws4_request`;
  const toSign = ["AWS4-HMAC-SHA256", amzDate, scope, sha256(canonical)].join("\n");
  const kDate = hmac(`AWS4${secret}`, day);
  const kSigning = hmac(hmac(hmac(kDate, region), "s3"), "aws4_request");
  return createHmac("sha256", kSigning).update(toSign).digest("hex");
}

export function startFakeS3(
  opts: { bucket?: string; accessKeyId?: string; secretAccessKey?: string; region?: string } = {},
): FakeS3 {
  const bucket = opts.bucket ?? "uploads";
  const accessKeyId = opts.accessKeyId ?? "AKIDTESTFAKE";
  const secretAccessKey = opts.secretAccessKey ?? "fake-secret-0123456789";
  const region = opts.region ?? "auto";
  const objects = new Map<string, { body: Uint8Array; contentType: string }>();
  const log: FakeS3["log"] = [];

  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      const url = new URL(req.url);
      const [, b, ...rest] = url.pathname.split("/");
      const key = decodeURIComponent(rest.join("/"));
      const respond = (res: Response) => {
        log.push({ method: req.method, key, status: res.status });
        return res;
      };
      const auth =
        /^AWS4-HMAC-SHA256 Credential=([^/]+)\/(\d{8})\/([^/]+)\/s3\/aws4_request,SignedHeaders=([^,]+),Signature=([0-9a-f]{64})$/.exec(
          req.headers.get("authorization") ?? "",
        );
      if (!auth || auth[1] !== accessKeyId || auth[3] !== region) return respond(xmlError(403, "InvalidAccessKeyId"));
      const signed = (auth[4] ?? "").split(";");
      if (!signed.includes("host") || !signed.includes("x-amz-date") || !signed.includes("x-amz-content-sha256"))
        return respond(xmlError(403, "AccessDenied"));
      const body = new Uint8Array(await req.arrayBuffer());
      const payloadHash = req.headers.get("x-amz-content-sha256") ?? "";
      if (payloadHash !== sha256(body)) return respond(xmlError(400, "XAmzContentSHA256Mismatch"));
      if (expectedSignature(req, url, signed, secretAccessKey, region, payloadHash) !== auth[5])
        return respond(xmlError(403, "SignatureDoesNotMatch"));
      if (b !== bucket) return respond(xmlError(404, "NoSuchBucket"));
      if (!key) return respond(xmlError(400, "InvalidRequest"));
      switch (req.method) {
        case "PUT":
          objects.set(key, { body, contentType: req.headers.get("content-type") ?? "binary/octet-stream" });
          return respond(new Response(null, { status: 200, headers: { etag: `"${sha256(body).slice(0, 32)}"` } }));
        case "GET":
        case "HEAD": {
          const o = objects.get(key);
          if (!o)
            return respond(req.method === "HEAD" ? new Response(null, { status: 404 }) : xmlError(404, "NoSuchKey"));
          const headers = { "content-type": o.contentType, "content-length": String(o.body.byteLength) };
          return respond(
            new Response(req.method === "HEAD" ? null : (o.body as Uint8Array<ArrayBuffer>), { status: 200, headers }),
          );
        }
        case "DELETE":
          objects.delete(key);
          return respond(new Response(null, { status: 204 }));
        default:
          return respond(xmlError(405, "MethodNotAllowed"));
      }
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}`,
    bucket,
    accessKeyId,
    secretAccessKey,
    region,
    objects,
    log,
    stop: async () => {
      await server.stop(true);
    },
  };
}

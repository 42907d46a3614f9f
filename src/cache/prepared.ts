/**
 * Responses prepared once per cached value: the JSON envelope's bytes, a strong ETag over them and
 * the two headers that depend on them, built when the value enters L1 (CacheModuleDef.prepare) so
 * that an L1 hit serializes, encodes and hashes nothing.
 *
 * The ETag is `"<byte length, base 36>-<cyrb53 of the JSON, base 36>"`: strong (it changes with
 * every byte of the body), synchronous (no Web Crypto promise inside `remember`) and cheap. It is
 * not a security boundary: a collision between two versions of one resource (≈ 2^-53 per pair)
 * would only make a client keep a copy one interval longer.
 */
import { hash53 } from "../util/hash.ts";

export interface PreparedResponse {
  /** The envelope, UTF-8 encoded. */
  readonly body: Uint8Array<ArrayBuffer>;
  /** Strong ETag, quoted. */
  readonly etag: string;
  /** `content-type` and `etag`, for a 200. */
  readonly headers: Headers;
  /** `etag` alone, for a 304. */
  readonly notModifiedHeaders: Headers;
}

const encoder = new TextEncoder();

export function prepareJson(envelope: unknown): PreparedResponse {
  const json = JSON.stringify(envelope);
  const body = encoder.encode(json);
  const etag = `"${body.byteLength.toString(36)}-${hash53(json).toString(36)}"`;
  return {
    body,
    etag,
    headers: new Headers({ "content-type": "application/json", etag }),
    notModifiedHeaders: new Headers({ etag }),
  };
}

/**
 * `If-None-Match` against one ETag (RFC 9110 §13.1.2: weak comparison, a list, or `*`). The common
 * case — the client echoes the one tag it got — is a single string compare.
 */
export function etagMatches(ifNoneMatch: string, etag: string): boolean {
  if (ifNoneMatch === etag) return true;
  for (const part of ifNoneMatch.split(",")) {
    const tag = part.trim();
    if (tag === "*" || tag === etag || (tag.startsWith("W/") && tag.slice(2) === etag)) return true;
  }
  return false;
}

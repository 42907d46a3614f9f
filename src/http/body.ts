/**
 * Per-route JSON body limits, enforced while the body is read (the global MAX_BODY_BYTES in app.ts
 * stays the outer bound). A route needs a few hundred bytes to tens of KB; nothing beyond that is
 * read, and nesting is bounded before `JSON.parse` sees the text, so no request spends more than a
 * few microseconds of CPU per KB it is allowed to send.
 *
 *   .post("/login", jsonBody(LOGIN_MAX_BYTES), v("json", LoginBody), handler)
 */
import { createMiddleware } from "hono/factory";
import { AppError } from "../errors.ts";
import type { AppEnv } from "../types.ts";

/** Deepest array/object nesting a JSON body may have (ours need 2–3 levels). */
export const MAX_JSON_DEPTH = 32;

/** Body limits per route, bytes (a route's largest legitimate body plus generous slack). */
export const BODY_LIMITS = {
  /** `{phone, code}`: ~60 bytes. */
  login: 1024,
  /** Routes that take no body (send-code, sign-in, follow, like): whatever a client sends stays small. */
  none: 1024,
  /** Operator shop/voucher writes: strings up to 1 KB (images, rules) plus ~500 bytes of fields. */
  operator: 8 * 1024,
  /** A note: title 255 + content 2048 + images 2048 characters, up to 4 bytes each when escaped as UTF-8. */
  note: 32 * 1024,
} as const;

const JSON_MEDIA = /^application\/([\w.-]+\+)?json$/i;
const decoder = new TextDecoder("utf-8", { fatal: true });

function tooLarge(max: number): AppError {
  return new AppError("PAYLOAD_TOO_LARGE", `body larger than ${max} bytes`);
}

/**
 * Reads at most `max` bytes of `body`; throws 413 as soon as more arrive (the rest is never pulled:
 * the stream is cancelled).
 */
export async function readCapped(body: ReadableStream<Uint8Array>, max: number): Promise<Uint8Array> {
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > max) {
      reader.cancel().catch(() => {});
      throw tooLarge(max);
    }
    chunks.push(value);
  }
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

/**
 * Index of the first point where `text` nests arrays/objects deeper than `max`, or -1. A linear
 * scan that skips string contents (and their escapes); it does not validate JSON, `JSON.parse` does.
 */
export function jsonDepthExceeded(text: string, max: number): number {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text.charCodeAt(i);
    if (inString) {
      if (ch === 92 /* \ */) i++;
      else if (ch === 34 /* " */) inString = false;
    } else if (ch === 34) inString = true;
    else if (ch === 91 /* [ */ || ch === 123 /* { */) {
      if (++depth > max) return i;
    } else if (ch === 93 /* ] */ || ch === 125 /* } */) depth--;
  }
  return -1;
}

/**
 * Caps the request body at `maxBytes` (413: by Content-Length before reading, or while reading a
 * chunked body) and, for a JSON media type, refuses invalid UTF-8 and nesting deeper than
 * MAX_JSON_DEPTH (400). The checked text is left in Hono's body cache, where the `v("json", …)`
 * validator after it reads it; a non-JSON body is never read further (the validator sees `{}`).
 */
export function jsonBody(maxBytes: number) {
  return createMiddleware<AppEnv>(async (c, next) => {
    const raw = c.req.raw;
    if (!raw.body) return await next();
    const declared = raw.headers.get("content-length");
    if (declared !== null && !(Number(declared) <= maxBytes)) throw tooLarge(maxBytes);
    const type = raw.headers.get("content-type");
    if (!type || !JSON_MEDIA.test(type.split(";")[0]!.trim())) return await next();
    const bytes = await readCapped(raw.body, maxBytes);
    let text: string;
    try {
      text = decoder.decode(bytes);
    } catch {
      throw new AppError("INVALID_INPUT", "body is not valid UTF-8");
    }
    if (jsonDepthExceeded(text, MAX_JSON_DEPTH) >= 0) throw new AppError("INVALID_INPUT", `JSON nested deeper than ${MAX_JSON_DEPTH} levels`);
    // Hono's body cache holds promises (its type says values): `c.req.json()` reads this text.
    (c.req.bodyCache as { text?: Promise<string> }).text = Promise.resolve(text);
    return await next();
  });
}

/**
 * The outer bound for every body (MAX_BODY_BYTES), without reading anything itself: a declared
 * Content-Length over the bound is a 413 at once; a chunked body is wrapped in a counting stream
 * that fails with 413 once more than the bound has passed through it. (hono/body-limit buffered a
 * chunked body up to the bound before any route saw it — 1 MiB read and copied for a login that
 * needs 60 bytes; bench row shop-l1-hostile.) Routes still read through their own, smaller caps
 * (jsonBody), which cancel the stream as soon as they are exceeded.
 */
export function streamLimit(maxBytes: number) {
  return createMiddleware<AppEnv>(async (c, next) => {
    const raw = c.req.raw;
    if (!raw.body) return await next();
    const declared = raw.headers.get("content-length");
    if (declared !== null && !raw.headers.has("transfer-encoding")) {
      if (!(Number(declared) <= maxBytes)) throw tooLarge(maxBytes);
      return await next();
    }
    let size = 0;
    const counted = raw.body.pipeThrough(
      new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, ctl) {
          size += chunk.byteLength;
          if (size > maxBytes) ctl.error(tooLarge(maxBytes));
          else ctl.enqueue(chunk);
        },
      }),
    );
    c.req.raw = new Request(raw, { body: counted, duplex: "half" } as RequestInit);
    return await next();
  });
}

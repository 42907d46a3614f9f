/**
 * Per-route JSON body limits, enforced while the body is read (the global MAX_BODY_BYTES in app.ts
 * stays the outer bound). A route needs a few hundred bytes to tens of KB; nothing beyond that is
 * read, and nesting is bounded before `JSON.parse` sees the text, so no request spends more than a
 * few microseconds of CPU per KB it is allowed to send.
 *
 *   .post("/login", jsonBody(LOGIN_MAX_BYTES), v("json", LoginBody), handler)
 */
import type { Context } from "hono";
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

/** Occurrences of `needle` in `haystack` (TypedArray.indexOf finds each candidate natively). */
function countOccurrences(haystack: Uint8Array, needle: Uint8Array, stopAfter: number): number {
  let n = 0;
  const first = needle[0] as number;
  for (let at = haystack.indexOf(first); at >= 0 && at <= haystack.length - needle.length; at = haystack.indexOf(first, at + 1)) {
    let i = 1;
    while (i < needle.length && haystack[at + i] === needle[i]) i++;
    if (i === needle.length) {
      if (++n > stopAfter) return n;
      at += needle.length - 1;
    }
  }
  return n;
}

/**
 * Reads at most `max` bytes of `body`; throws 413 as soon as more arrive (the rest is never pulled:
 * the stream is cancelled). Optionally counts `count.needle` in the stream as it passes (across chunk
 * edges: each window is the last needle − 1 bytes of what came before plus the new chunk, too short
 * to hold a whole earlier match) and stopping — cancelling the rest — with `count.tooMany()` once
 * more than `count.max` have passed.
 */
export async function readCapped(body: ReadableStream<Uint8Array>, max: number, count?: { needle: Uint8Array; max: number; tooMany: () => Error }): Promise<Uint8Array> {
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  let seen = 0;
  let tail = new Uint8Array(0);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > max) {
      reader.cancel().catch(() => {});
      throw tooLarge(max);
    }
    if (count) {
      const window = tail.byteLength === 0 ? value : concatBytes(tail, value);
      seen += countOccurrences(window, count.needle, count.max - seen);
      if (seen > count.max) {
        reader.cancel().catch(() => {});
        throw count.tooMany();
      }
      tail = window.slice(Math.max(0, window.byteLength - (count.needle.byteLength - 1)));
    }
    chunks.push(value);
  }
  return chunks.length === 1 ? (chunks[0] as Uint8Array) : concatBytes(...chunks);
}

function concatBytes(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

const MULTIPART = /^multipart\/form-data\s*;.*?\bboundary=(?:"([^"]{1,70})"|([^\s;]{1,70}))/i;

/**
 * A multipart body bounded in bytes and in parts *before* anything parses it (issue 16: a 78,000-part
 * upload cost tens of ms of CPU in the parser, before the file check, and stalled every request of
 * the isolate). Reads the body through `maxBytes(config)` (413 past it), refuses a body that is not
 * multipart with a boundary (400) or that has more than `maxParts` parts (413), and leaves the bytes
 * in Hono's body cache for `parseBody` and the idempotency fingerprint.
 */
export function multipartBody(maxBytes: (c: Context<AppEnv>) => number, maxParts: number, tooLargeMessage: (c: Context<AppEnv>) => string) {
  return createMiddleware<AppEnv>(async (c, next) => {
    const raw = c.req.raw;
    const m = MULTIPART.exec(raw.headers.get("content-type") ?? "");
    const boundary = m?.[1] ?? m?.[2];
    if (!raw.body || !boundary) throw new AppError("INVALID_INPUT", "expected a multipart/form-data body");
    const max = maxBytes(c);
    const declared = raw.headers.get("content-length");
    if (declared !== null && !(Number(declared) <= max)) throw new AppError("PAYLOAD_TOO_LARGE", tooLargeMessage(c));
    let bytes: Uint8Array;
    try {
      // n delimiters close n − 1 parts (the last one is the closing `--boundary--`): counted as the
      // body streams in, so a body with too many parts is refused without reading the rest of it.
      bytes = await readCapped(raw.body, max, {
        needle: new TextEncoder().encode(`--${boundary}`),
        max: maxParts + 1,
        tooMany: () => new AppError("PAYLOAD_TOO_LARGE", `at most ${maxParts} parts in a multipart body`),
      });
    } catch (err) {
      if (err instanceof AppError && err.code === "PAYLOAD_TOO_LARGE" && err.message.startsWith("body larger")) throw new AppError("PAYLOAD_TOO_LARGE", tooLargeMessage(c));
      throw err;
    }
    const buffer = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
    (c.req.bodyCache as { arrayBuffer?: Promise<ArrayBuffer> }).arrayBuffer = Promise.resolve(buffer);
    return await next();
  });
}

/** Pairs a url-encoded form may have (the console's largest form has ~20 fields). */
export const MAX_FORM_PAIRS = 64;
/** Bytes a console form may have. */
export const MAX_FORM_BYTES = 16 * 1024;

/**
 * A url-encoded form, read through MAX_FORM_BYTES (413 past it) and counted in pairs before
 * URLSearchParams sees it (MAX_FORM_PAIRS; null past it, as for any other unreadable form): a 1 MB
 * form of 110,000 pairs cost 60–78 ms of CPU per request (issue 16). First value of a name wins.
 */
export async function boundedForm(req: Request): Promise<Record<string, string> | null> {
  const type = req.headers.get("content-type") ?? "";
  if (!type.startsWith("application/x-www-form-urlencoded") || !req.body) return null;
  const declared = req.headers.get("content-length");
  if (declared !== null && !(Number(declared) <= MAX_FORM_BYTES)) throw tooLarge(MAX_FORM_BYTES);
  const bytes = await readCapped(req.body, MAX_FORM_BYTES);
  if (countOccurrences(bytes, new Uint8Array([0x26]), MAX_FORM_PAIRS) >= MAX_FORM_PAIRS) return null;
  const out: Record<string, string> = {};
  let text: string;
  try {
    text = decoder.decode(bytes);
  } catch {
    return null;
  }
  for (const [k, v] of new URLSearchParams(text)) if (!(k in out)) out[k] = v;
  return out;
}

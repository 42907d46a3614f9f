/**
 * `Idempotency-Key` on the mutating routes a client may retry (draft-ietf-httpapi-idempotency-key-header,
 * Stripe's practice). A request without the header pays one header read.
 * Per (caller, method, route pattern, key): claim (lua/idempotency-claim.lua, 1 command, a lease of
 * IDEMPOTENCY_LOCK_MS) → the route runs → finish (lua/idempotency-finish.lua, 1 command) stores a
 * final response (status < 400, not a business refusal) for IDEMPOTENCY_TTL_SECONDS, or releases
 * the key. A taken key answers the stored response (`Idempotent-Replayed: true`), 409 + Retry-After
 * while it runs, 422 for a different request. 401/403 never reach the claim.
 * Windows: a process that dies mid-request holds the key until the lease ends; a route slower than
 * the lease loses its claim; a 5xx after a partial write is not stored, so a retry runs again.
 * Details: docs/modules.md "http/idempotency.ts".
 */
import type { Context, Next } from "hono";
import { createMiddleware } from "hono/factory";
import type { Config } from "../env.ts";
import { AppError } from "../errors.ts";
import { idempotencyDoc } from "../openapi/describe.ts";
import { keys } from "../redis/keys.ts";
import { scriptsFor } from "../redis/scripts.ts";
import type { AppEnv } from "../types.ts";
import type { UserEnv } from "./auth.ts";
import { bearer } from "./auth.ts";
import { readCapped } from "./body.ts";
import { sha256Hex } from "../util/crypto.ts";

export const IDEMPOTENCY_HEADER = "idempotency-key";
export const REPLAYED_HEADER = "idempotent-replayed";
/** Response headers kept with a stored response (besides the status and body). */
const STORED_HEADERS = ["content-type", "location"] as const;
/** Raw form: 1–255 visible ASCII characters (Stripe's keys; the draft's sf-string, unquoted). */
const RAW_KEY = /^[\x21-\x7e]{1,255}$/;
const MAX_KEY_CHARS = 255;

const encoder = new TextEncoder();
const utf8 = new TextDecoder("utf-8", { fatal: true });
const EMPTY = new Uint8Array(0);

/**
 * The client's key: an sf-string (RFC 8941 §3.3.3: `"…"`, printable ASCII, `\"` and `\\` the only
 * escapes) as the draft specifies, or the same characters unquoted as Stripe's clients send them.
 * `"abc"` and `abc` are the same key. Null when malformed.
 */
export function parseIdempotencyKey(header: string): string | null {
  if (header.charCodeAt(0) !== 34 /* " */) return RAW_KEY.test(header) ? header : null;
  if (header.length < 3 || header.charCodeAt(header.length - 1) !== 34) return null;
  let out = "";
  for (let i = 1; i < header.length - 1; i++) {
    let ch = header.charCodeAt(i);
    if (ch === 92 /* \ */) {
      ch = header.charCodeAt(++i);
      if ((ch !== 34 && ch !== 92) || i >= header.length - 1) return null;
    } else if (ch === 34 || ch < 0x20 || ch > 0x7e) return null;
    out += String.fromCharCode(ch);
  }
  return out.length >= 1 && out.length <= MAX_KEY_CHARS ? out : null;
}

function concat(head: Uint8Array, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(head.byteLength + body.byteLength);
  out.set(head);
  out.set(body, head.byteLength);
  return out;
}

/**
 * The request body's bytes, for the fingerprint, leaving it readable by the route: the text
 * jsonBody (http/body.ts) already read and checked, or the raw body read here under `maxBytes`
 * and left in Hono's body cache, from which `c.req.json()`/`parseBody()` read it (with the
 * request's content type). The route's own limit runs before this middleware, so the cap here is
 * the same or looser, never a second, different answer.
 */
async function requestBytes<E extends AppEnv>(c: Context<E>, maxBytes: number): Promise<Uint8Array> {
  const cache = c.req.bodyCache as { text?: Promise<string>; arrayBuffer?: Promise<ArrayBuffer> };
  if (cache.text) return encoder.encode(await cache.text);
  if (cache.arrayBuffer) return new Uint8Array(await cache.arrayBuffer);
  const raw = c.req.raw;
  if (!raw.body) return EMPTY;
  const declared = raw.headers.get("content-length");
  if (declared !== null && !(Number(declared) <= maxBytes))
    throw new AppError("PAYLOAD_TOO_LARGE", `body larger than ${maxBytes} bytes`);
  const bytes = await readCapped(raw.body, maxBytes);
  const whole =
    bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength
      ? (bytes.buffer as ArrayBuffer)
      : (bytes.slice().buffer as ArrayBuffer);
  cache.arrayBuffer = Promise.resolve(whole);
  return bytes;
}

interface DoneRecord {
  /** Fingerprint of the request that produced it. */
  f: string;
  /** HTTP status. */
  s: number;
  /** STORED_HEADERS present on the response. */
  h: [string, string][];
  /** Body text (UTF-8; these routes answer JSON). */
  b: string;
}

/**
 * Records are strings with a one-letter tag ("r" running, "d" done) before their JSON: the tag
 * keeps @upstash/redis from JSON-parsing them on the way back, so what is compared and replayed
 * is the exact stored text.
 */
function parseRecord(raw: unknown): { running: true; f: string } | ({ running: false } & DoneRecord) | null {
  if (typeof raw !== "string" || raw.length < 2) return null;
  try {
    const body = JSON.parse(raw.slice(1)) as Record<string, unknown>;
    if (raw[0] === "r" && typeof body.f === "string") return { running: true, f: body.f };
    if (
      raw[0] === "d" &&
      typeof body.f === "string" &&
      typeof body.s === "number" &&
      typeof body.b === "string" &&
      Array.isArray(body.h)
    ) {
      return { running: false, f: body.f, s: body.s, h: body.h as [string, string][], b: body.b };
    }
  } catch {
    // Not ours: treated as unreadable below.
  }
  return null;
}

/** The stored form of a final response, or null when it must not be stored (too large, not text). */
/** The record to store for a final response; null when it cannot be stored, "refusal" when it must not be. */
async function doneRecord(res: Response, fingerprint: string, maxBytes: number): Promise<string | null | "refusal"> {
  const declared = res.headers.get("content-length");
  if (declared !== null && Number(declared) > maxBytes) return null;
  const bytes = new Uint8Array(await res.clone().arrayBuffer());
  if (bytes.byteLength > maxBytes) return null;
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    return null;
  }
  if (text.startsWith('{"success":false')) return "refusal";
  const h: [string, string][] = [];
  for (const name of STORED_HEADERS) {
    const value = res.headers.get(name);
    if (value !== null) h.push([name, value]);
  }
  return `d${JSON.stringify({ f: fingerprint, s: res.status, h, b: text } satisfies DoneRecord)}`;
}

const MULTIPART_BOUNDARY = /^multipart\/form-data\s*;.*?\bboundary=(?:"([^"]{1,70})"|([^\s;]{1,70}))/i;
/** windows-1252 as WHATWG defines it maps every byte to one code point: a lossless byte view as a string. */
const bytesAsText = new TextDecoder("windows-1252");

/**
 * The content type and body as fingerprinted. A multipart body's boundary is chosen afresh each
 * time a client serialises the same form (a browser retrying a FormData upload sends other
 * bytes), so it is taken out of both: the parts (names, file names, types, contents) remain.
 * The boundary never occurs inside the parts (RFC 2046 §5.1.1), so removing it loses nothing.
 */
function boundaryFree(type: string, body: Uint8Array): { type: string; body: Uint8Array } {
  const m = MULTIPART_BOUNDARY.exec(type);
  const boundary = m ? (m[1] ?? m[2]) : undefined;
  if (!boundary) return { type, body };
  return { type: "multipart/form-data", body: encoder.encode(bytesAsText.decode(body).replaceAll(boundary, "")) };
}

type BodyCap = number | ((config: Config) => number);

/** Who the caller is, as part of the scope: never a raw credential (the scope is hashed anyway). */
type CallerOf = () => Promise<string> | string;

async function guard<E extends AppEnv>(
  c: Context<E>,
  next: Next,
  callerOf: CallerOf,
  cap: BodyCap,
): Promise<Response | undefined> {
  const header = c.req.raw.headers.get(IDEMPOTENCY_HEADER);
  if (header === null) {
    await next();
    return;
  }
  const key = parseIdempotencyKey(header);
  if (key === null)
    throw new AppError(
      "INVALID_INPUT",
      "Idempotency-Key must be 1–255 visible ASCII characters, optionally as a quoted sf-string",
    );
  const deps = c.get("deps");
  const config = deps.config;
  const method = c.req.method;
  const url = new URL(c.req.url);
  const { type, body } = boundaryFree(
    c.req.raw.headers.get("content-type") ?? "",
    await requestBytes(c, typeof cap === "number" ? cap : cap(config)),
  );
  // The fingerprint covers what the route reads: method, concrete path and query, content type, body.
  const head = encoder.encode(`${method}\n${url.pathname}${url.search}\n${type}\n`);
  const caller = await callerOf();
  const [callerHash, scope, fingerprint] = await Promise.all([
    // The caller's own tag (its records and its hourly quota share a slot); 16 bytes suffice to tell callers apart.
    sha256Hex(encoder.encode(`caller\n${caller}`)).then((h) => h.slice(0, 32)),
    sha256Hex(encoder.encode(`${caller}\n${method}\n${c.req.routePath}\n${key}`)),
    sha256Hex(concat(head, body)),
  ]);
  const recordKey = keys.idempotency(callerHash, scope);
  const now = deps.clock.now();
  const hour = Math.floor(now / 3_600_000);
  const quotaKey = keys.idempotencyQuota(callerHash, hour);
  const running = `r${JSON.stringify({ f: fingerprint, t: crypto.randomUUID() })}`;
  const scripts = scriptsFor(deps.redis);

  let claim: [number, (string | number)?, number?];
  try {
    claim = await scripts.idempotencyClaim.exec(
      [recordKey, quotaKey],
      [
        running,
        String(config.IDEMPOTENCY_LOCK_MS),
        String(config.IDEMPOTENCY_KEYS_PER_HOUR),
        String((hour + 1) * 3_600_000 - now),
      ],
    );
  } catch (err) {
    // The claim may have run (a timeout is not a "no"): then the key is "running" under a lease no
    // request will finish, and the client's retry would meet 409 for IDEMPOTENCY_LOCK_MS. This
    // request knows its claim token, so it releases its own claim in the background (a CAS: a
    // no-op if the claim never ran or someone else holds the key). A claim still in flight that
    // lands after this release keeps the key until its lease ends — 409s, never a second run.
    deps.waitUntil(
      scripts.idempotencyFinish
        .exec([recordKey], [running, "", String(config.IDEMPOTENCY_TTL_SECONDS)])
        .catch((releaseErr: unknown) => {
          c.get("log").warn("idempotency claim release after a lost reply failed; the key waits out its lease", {
            err: releaseErr,
            path: c.req.path,
          });
        }),
    );
    // Running unguarded would break the promise the client asked for: refuse, retryably.
    throw new AppError("UNAVAILABLE", "idempotency store unavailable; retry with the same Idempotency-Key", {
      cause: err,
      retryAfterSeconds: 1,
    });
  }
  if (claim[0] === 2) {
    throw new AppError(
      "RATE_LIMITED",
      `at most ${config.IDEMPOTENCY_KEYS_PER_HOUR} new Idempotency-Keys per hour; retry without a key or later`,
      {
        retryAfterSeconds: Math.ceil(Number(claim[1]) / 1000),
      },
    );
  }
  if (claim[0] !== 1) {
    const held = parseRecord(claim[1] as string | undefined);
    if (!held) throw new AppError("INTERNAL", "unreadable idempotency record");
    if (held.f !== fingerprint)
      throw new AppError("IDEMPOTENCY_KEY_REUSED", "this Idempotency-Key was used with a different request");
    // The first request usually finishes within milliseconds; its lease (claim[2] ms) is only the worst case.
    if (held.running)
      throw new AppError("CONFLICT", "a request with this Idempotency-Key is still running", { retryAfterSeconds: 1 });
    const headers = new Headers(held.h);
    headers.set(REPLAYED_HEADER, "true");
    // A null-body status cannot carry even an empty string in the Fetch API.
    return new Response(held.s === 204 || held.s === 205 || held.s === 304 ? null : held.b, {
      status: held.s,
      headers,
    });
  }

  let done: string | null = null;
  try {
    await next();
    if (c.error === undefined && c.res.status < 400) {
      const record = await doneRecord(c.res, fingerprint, config.IDEMPOTENCY_MAX_RESPONSE_BYTES);
      if (record === null)
        c.get("log").warn("idempotent response not stored (too large or not text)", {
          path: c.req.path,
          status: c.res.status,
        });
      done = record === "refusal" ? null : record;
    }
  } finally {
    // Awaited, not background: a retry that arrives after this response must see the outcome.
    try {
      const ours = await scripts.idempotencyFinish.exec(
        [recordKey],
        [running, done ?? "", String(config.IDEMPOTENCY_TTL_SECONDS)],
      );
      if (ours !== 1)
        c.get("log").warn("idempotency lease ended before the request did; outcome not stored", {
          path: c.req.path,
          leaseMs: config.IDEMPOTENCY_LOCK_MS,
        });
    } catch (err) {
      // The route's work is done: answer it. The key stays "running" until its lease ends.
      c.get("log").error("idempotency finish failed", { err, path: c.req.path });
    }
  }
  return;
}

/**
 * For routes behind `requireUser`: scope = the session's user. `maxBodyBytes` bounds a body the
 * route has not read yet (JSON routes' jsonBody runs first and its text is reused).
 */
export function idempotentUser(maxBodyBytes: BodyCap) {
  return idempotencyDoc(
    createMiddleware<UserEnv>((c, next) => guard(c, next, () => `u:${c.get("user").id}`, maxBodyBytes)),
  );
}

/**
 * For routes behind `requireOperator`: scope = a SHA-256 of the operator credential (rotating
 * ADMIN_TOKEN starts a fresh scope).
 */
export function idempotentOperator(maxBodyBytes: BodyCap) {
  return idempotencyDoc(
    createMiddleware<AppEnv>((c, next) =>
      guard(
        c,
        next,
        async () => `op:${await sha256Hex(encoder.encode(bearer(c.req.header("authorization")) ?? ""))}`,
        maxBodyBytes,
      ),
    ),
  );
}

/**
 * Console sessions: a signed, expiring cookie instead of the operator token itself.
 *
 * The cookie is `v1.<expiresMs>.<nonce>.<mac>` with mac = HMAC-SHA256(ADMIN_TOKEN, "console:v1:<expiresMs>:<nonce>").
 * Any isolate (Workers, Bun, Deno) verifies it without Redis; rotating ADMIN_TOKEN revokes every
 * console session at once. Sign-out and "revoke all" are server-side as well (routes/console.tsx:
 * a revoked nonce, and an epoch before which sessions are void, both in Redis). The raw token never leaves the login
 * request. The per-session CSRF token is a second HMAC over the session's mac, so it is bound to
 * one session, changes at each login, and cannot be derived without ADMIN_TOKEN.
 */
import { hmacSha256Hex, randomHex, timingSafeEqual } from "../util/crypto.ts";

export const SESSION_COOKIE = "cityhub_console";
/** Lifetime of a console session, ms (one working day; the browser keeps the cookie as long). */
export const SESSION_TTL_MS = 8 * 3600_000;

export interface ConsoleSession {
  expiresMs: number;
  /** When it was issued, epoch ms (expiresMs − SESSION_TTL_MS). */
  issuedMs: number;
  /** The session's random id (32 hex): what a sign-out revokes. */
  nonce: string;
  /** Hidden field of every state-changing form. */
  csrf: string;
}

const _enc = new TextEncoder();

const hmacHex = hmacSha256Hex;

const csrfFor = (secret: string, mac: string) => hmacHex(secret, `console:csrf:${mac}`);

/** A new session's cookie value and its CSRF token. */
export async function issueSession(secret: string, now: number): Promise<{ cookie: string; session: ConsoleSession }> {
  const expiresMs = now + SESSION_TTL_MS;
  const nonce = randomHex(16);
  const mac = await hmacHex(secret, `console:v1:${expiresMs}:${nonce}`);
  return {
    cookie: `v1.${expiresMs}.${nonce}.${mac}`,
    session: { expiresMs, issuedMs: now, nonce, csrf: await csrfFor(secret, mac) },
  };
}

/** The session a cookie proves at `now`, or null (malformed, forged, signed with another token, expired). */
export async function verifySession(
  secret: string,
  cookie: string | undefined,
  now: number,
): Promise<ConsoleSession | null> {
  if (!cookie || cookie.length > 200) return null;
  const m = /^v1\.(\d{13,15})\.([0-9a-f]{32})\.([0-9a-f]{64})$/.exec(cookie);
  if (!m) return null;
  const [, exp = "", nonce = "", mac = ""] = m;
  const expiresMs = Number(exp);
  const expected = await hmacHex(secret, `console:v1:${exp}:${nonce}`);
  if (!timingSafeEqual(mac, expected) || expiresMs <= now) return null;
  return { expiresMs, issuedMs: expiresMs - SESSION_TTL_MS, nonce, csrf: await csrfFor(secret, mac) };
}

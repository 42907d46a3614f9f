/**
 * Sessions: signed tokens, with the record in Redis (`login:token:j:<jti>`, a hash whose TTL is the
 * idle timeout), so revocation and idle expiry live where every isolate sees them.
 * A token is a compact HS256 JWT carrying `sub`, `nick`, `icon`, `iat`, `exp`, `auth_time` and a
 * random 128-bit `jti` that names the session; a re-issued token keeps `jti` and `auth_time`.
 * An isolate verifies signatures itself (a forged token costs no Redis call); whether the session
 * still exists is the session cache's job (services/session-cache.ts).
 * Keys: SESSION_SECRET signs and verifies, SESSION_SECRET_PREVIOUS only verifies; both are imported
 * once per isolate (`deps.isolate.sessions`). Legacy 32-hex tokens are looked up in Redis.
 * Details: docs/modules.md "services/session.ts".
 */
import { sign } from "hono/jwt";
import type { RedisPort } from "../deps.ts";
import { keys } from "../redis/keys.ts";
import { scriptsFor } from "../redis/scripts.ts";

export interface SessionUser {
  id: number;
  nickName: string;
  icon: string;
}

/** What a verified token says. `sid` names the session in the revocation stream. */
export interface SessionClaims {
  user: SessionUser;
  /** `j:<jti>` for a signed token, `l:<token>` for a legacy one (never JSON, so the SDK leaves it a string). */
  sid: string;
  /** Issued at, epoch seconds (0 for legacy tokens). */
  iat: number;
  /** Absolute end of the token, epoch ms (Infinity for legacy tokens: their record's TTL bounds them). */
  expiresAt: number;
  /** Sign-in time, epoch seconds (`auth_time`; a token from before re-issue existed: its `iat`; 0 for legacy tokens). */
  authTime: number;
  /**
   * From when (epoch ms) a request with this token is handed a fresh one: once less than half of
   * SESSION_MAX_AGE_SECONDS is left before `exp`. Infinity when no later `exp` is possible (the
   * token already ends at the session's hard cap) and for legacy tokens.
   */
  reissueAt: number;
}

/**
 * Revocations the stream keeps. An isolate that fell further behind (idle through a logout storm)
 * forgets everything it trusted and re-checks each session on next use.
 */
export const REVOKED_KEEP = 10_000;

/** A token's absolute lifetime when none is configured, seconds (30 days). */
export const DEFAULT_MAX_AGE_SECONDS = 30 * 86_400;
/** The hard cap on a session's age (from its sign-in) when none is configured: this × the token lifetime (90 days). */
export const DEFAULT_HARD_CAP_FACTOR = 3;

/** Classic unsigned tokens: 16 random bytes as 32 hex chars. */
export const LEGACY_TOKEN_RE = /^[0-9a-f]{32}$/;
/**
 * Shape of our tokens (checked before any crypto): three base64url parts, the last one the 32-byte
 * HMAC (43 chars). The length cap keeps an attacker's token from costing more than one HMAC block run.
 */
const SIGNED_TOKEN_RE = /^[A-Za-z0-9_-]{10,64}\.[A-Za-z0-9_-]{20,1400}\.[A-Za-z0-9_-]{43}$/;

const HMAC = { name: "HMAC", hash: "SHA-256" } as const;

function base64url(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/**
 * The isolate's signing keys: imported from the secrets once, on first use (import is async, and
 * isolates are built synchronously), then reused for every sign and verify.
 */
export class SessionKeys {
  private imported: { current: CryptoKey; previous: CryptoKey | null } | undefined;
  /** No session outlives its sign-in by more than this, seconds, however often its token is re-issued. */
  readonly hardCapSeconds: number;

  /**
   * @param maxAgeSeconds   a token's absolute lifetime (its `exp` = `iat` + this, capped below);
   *                        past it the token is refused whatever Redis says (SESSION_MAX_AGE_SECONDS)
   * @param hardCapSeconds  a session's absolute lifetime from its sign-in (`auth_time`): no token
   *                        for it, re-issued or not, is valid past `auth_time` + this
   *                        (SESSION_HARD_CAP_SECONDS; default 3 × maxAgeSeconds, never below it)
   */
  constructor(
    private readonly secret: string,
    private readonly previousSecret?: string,
    readonly maxAgeSeconds = DEFAULT_MAX_AGE_SECONDS,
    hardCapSeconds?: number,
  ) {
    this.hardCapSeconds = Math.max(hardCapSeconds ?? DEFAULT_HARD_CAP_FACTOR * maxAgeSeconds, maxAgeSeconds);
  }

  /**
   * The keys once imported. Callers before the first import finishes each import their own (a
   * few µs) rather than await one shared promise: on workerd a request may not await a promise
   * another request's work settles (src/runtime.ts). The first result is kept.
   */
  private async keys(): Promise<{ current: CryptoKey; previous: CryptoKey | null }> {
    if (this.imported) return this.imported;
    const enc = new TextEncoder();
    const load = (s: string) => crypto.subtle.importKey("raw", enc.encode(s), HMAC, false, ["sign", "verify"]);
    const [current, previous] = await Promise.all([
      load(this.secret),
      this.previousSecret ? load(this.previousSecret) : null,
    ]);
    this.imported ??= { current, previous };
    return this.imported;
  }

  /** A new token for `user`, signed with the current key: a new session, signed in now. */
  async sign(user: SessionUser, nowMs: number): Promise<string> {
    const jti = base64url(crypto.getRandomValues(new Uint8Array(16)));
    return (await this.mint(user, jti, Math.floor(nowMs / 1000), nowMs)).token;
  }

  /**
   * A fresh token for an existing signed session (`sid` = `j:<jti>`): same `jti`, user and
   * `auth_time`, issued now, `exp` = min(now + SESSION_MAX_AGE_SECONDS, `auth_time` + the hard cap),
   * signed with the current key. Null when that `exp` would not be later than `notAfterMs` (the
   * caller's current end) or `sid` is not a signed session's. CPU only: whether the session still
   * exists is the caller's to check (SessionCache.reissue).
   */
  async reissue(
    user: SessionUser,
    sid: string,
    authTime: number,
    nowMs: number,
    notAfterMs: number,
  ): Promise<{ token: string; claims: SessionClaims } | null> {
    if (!sid.startsWith("j:")) return null;
    const minted = await this.mint(user, sid.slice(2), authTime, nowMs);
    return minted.claims.expiresAt > notAfterMs ? minted : null;
  }

  private async mint(
    user: SessionUser,
    jti: string,
    authTime: number,
    nowMs: number,
  ): Promise<{ token: string; claims: SessionClaims }> {
    const { current } = await this.keys();
    const iat = Math.floor(nowMs / 1000);
    const exp = Math.min(iat + this.maxAgeSeconds, authTime + this.hardCapSeconds);
    const token = await sign(
      { sub: String(user.id), nick: user.nickName, icon: user.icon, iat, exp, jti, auth_time: authTime },
      current,
      "HS256",
    );
    return { token, claims: this.claims(user, jti, iat, exp, authTime) };
  }

  /** The claims of a verified (or just minted) token; the end is clamped to the hard cap as configured now. */
  private claims(user: SessionUser, jti: string, iat: number, exp: number, authTime: number): SessionClaims {
    const capAt = authTime + this.hardCapSeconds;
    const end = Math.min(exp, capAt);
    // Re-issue only makes sense while a later `exp` is possible, i.e. the token ends before the cap.
    const reissueAt = end < capAt ? end * 1000 - this.maxAgeSeconds * 500 : Number.POSITIVE_INFINITY;
    return { user, sid: `j:${jti}`, iat, expiresAt: end * 1000, authTime, reissueAt };
  }

  /**
   * The claims of a token signed with the current or the previous key, or null (wrong shape, bad
   * signature, unexpected claims). CPU only: never touches Redis.
   *
   * Verified here with Web Crypto directly rather than hono/jwt's `verify` (which `sign` above
   * still uses): measured in-process on this box, hono/jwt's verify cost 25–30 µs per token, of
   * which the HMAC itself is ~5.5 µs — the rest is its generic JWT handling (header parsing and
   * alg dispatch, base64url and JSON of every part, claim checks we switch off). A cold token is
   * on the seckill path of every buyer's first request to an isolate. We issue exactly one header
   * (HS256, typ JWT), so the header segment is compared as text — which also closes the door on
   * alg confusion — and only the payload is decoded.
   */
  async verify(token: string, nowMs = Date.now()): Promise<SessionClaims | null> {
    if (!SIGNED_TOKEN_RE.test(token)) return null;
    const dot = token.lastIndexOf(".");
    const first = token.indexOf(".");
    if (token.slice(0, first) !== JWT_HEADER) return null;
    const signature = base64urlBytes(token.slice(dot + 1));
    if (signature?.byteLength !== 32) return null;
    // Canonical spelling only: 43 base64url chars carry 258 bits for 256, so the last char's two
    // spare bits gave every token three other spellings, each a separate cache key and record.
    if (base64url(signature) !== token.slice(dot + 1)) return null;
    const input = utf8.encode(token.slice(0, dot)) as Uint8Array<ArrayBuffer>;
    const { current, previous } = await this.keys();
    let valid = await crypto.subtle.verify("HMAC", current, signature, input);
    if (!valid && previous) valid = await crypto.subtle.verify("HMAC", previous, signature, input);
    if (!valid) return null;
    let payload: Record<string, unknown>;
    try {
      const bytes = base64urlBytes(token.slice(first + 1, dot));
      if (!bytes) return null;
      payload = JSON.parse(utf8Strict.decode(bytes)) as Record<string, unknown>;
    } catch {
      return null;
    }
    if (payload === null || typeof payload !== "object") return null;
    const { sub, nick, icon, iat, exp, jti, auth_time } = payload;
    if (typeof sub !== "string" || !/^[1-9]\d{0,15}$/.test(sub) || typeof nick !== "string" || typeof icon !== "string")
      return null;
    if (typeof jti !== "string" || !/^[A-Za-z0-9_-]{16,64}$/.test(jti) || typeof iat !== "number") return null;
    // Sign-in time: tokens from before re-issue existed were all issued at sign-in.
    const authTime = auth_time === undefined ? iat : auth_time;
    if (typeof authTime !== "number" || authTime > iat) return null;
    // Absolute lifetime: `exp` (or, for tokens issued before it existed, iat + the same maximum),
    // and never past the session's hard cap as configured now (lowering it ends older sessions too).
    const claims = this.claims(
      { id: Number(sub), nickName: nick, icon },
      jti,
      iat,
      typeof exp === "number" ? exp : iat + this.maxAgeSeconds,
      authTime,
    );
    if (nowMs >= claims.expiresAt) return null;
    return claims;
  }
}

/** base64url of `{"alg":"HS256","typ":"JWT"}`: the only header hono/jwt's `sign` writes for us. */
const JWT_HEADER = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9";
const utf8 = new TextEncoder();
const utf8Strict = new TextDecoder("utf-8", { fatal: true });

/** Decodes unpadded base64url; null when it is not (the shape regex already limits the alphabet). */
function base64urlBytes(s: string): Uint8Array<ArrayBuffer> | null {
  if (s.length % 4 === 1) return null;
  try {
    const bin = atob(s.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((s.length + 3) % 4));
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  } catch {
    return null;
  }
}

/** The session id of a legacy token in the revocation stream. */
export const legacySid = (token: string) => `l:${token}`;

/**
 * Opens a session: signs a token for `user` and stores its record with the idle timeout
 * `ttlSeconds`. Returns the raw token (what login hands the client). `keys` is the isolate's
 * (`deps.isolate.sessions.keys`), or `new SessionKeys(config.SESSION_SECRET)` in a script.
 */
export async function createSession(
  redis: RedisPort,
  user: SessionUser,
  ttlSeconds: number,
  keys_: SessionKeys,
  nowMs = Date.now(),
): Promise<string> {
  const token = await keys_.sign(user, nowMs);
  const key = keys.loginToken(token);
  const tx = redis.multi();
  tx.hset(key, { id: String(user.id), nickName: user.nickName, icon: user.icon });
  tx.expire(key, ttlSeconds);
  await tx.exec();
  return token;
}

/** The user of a legacy (unsigned) token from its Redis record, or null. One HMGET; no renewal (the cache renews). */
export async function readLegacySession(redis: RedisPort, token: string): Promise<SessionUser | null> {
  if (!LEGACY_TOKEN_RE.test(token)) return null;
  const fields = await redis.hmget<{ id: string | number | null; nickName: string | null; icon: string | null }>(
    keys.loginToken(token),
    "id",
    "nickName",
    "icon",
  );
  if (!fields || fields.id === null || fields.id === undefined) return null;
  return { id: Number(fields.id), nickName: String(fields.nickName ?? ""), icon: String(fields.icon ?? "") };
}

/** Ends a session everywhere: deletes the record and appends `sid` to the revocation stream (one command). */
export async function revokeSession(redis: RedisPort, token: string, sid: string): Promise<void> {
  await scriptsFor(redis).sessionRevoke.exec(
    [keys.loginToken(token), keys.loginRevoked(), keys.loginRevokedSeq()],
    [sid, String(REVOKED_KEEP)],
  );
}

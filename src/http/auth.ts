/**
 * Guards. `requireUser` resolves the session or answers 401; `optionalUser` resolves it when
 * present (public routes that personalise, e.g. `isLike`); `requireOperator` checks the configured
 * operator secret — user tokens never pass there. Sessions are resolved by the isolate's session
 * cache (services/session-cache.ts): a warm token costs no Redis call, a forged one none either;
 * the idle timeout slides in the background.
 *
 * Both user guards re-issue: a request whose token is within half of SESSION_MAX_AGE_SECONDS of
 * its `exp` is answered with a fresh token for the same session in `X-Session-Token` (one EXPIRE,
 * which also proves the session still exists: a missing record is a 401 here). The header is set
 * on the way out, only if the session is still alive then (not on the logout that ended it), with
 * `cache-control: no-store` (a credential is never cached).
 */
import { createMiddleware } from "hono/factory";
import type { Deps } from "../deps.ts";
import { AppError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { LegacyLookupRefused, type Reissued } from "../services/session-cache.ts";
import type { SessionUser } from "../services/session.ts";
import type { AppEnv } from "../types.ts";
import { timingSafeEqual } from "../util/crypto.ts";
import { limitAddress } from "./client-ip.ts";

export type UserEnv = AppEnv & { Variables: { user: SessionUser; token: string } };
export type MaybeUserEnv = AppEnv & { Variables: { user: SessionUser | null; token: string | null } };

/** `authorization: <token>` (classic) or `authorization: Bearer <token>`. */
export function bearer(header: string | undefined): string | null {
  if (!header) return null;
  const v = header.trim();
  const m = /^Bearer\s+(.+)$/i.exec(v);
  return (m ? m[1] : v)?.trim() || null;
}

/** Response header carrying a re-issued session token (docs/architecture.md "Sessions"; exposed to browsers by CORS). */
export const SESSION_TOKEN_HEADER = "x-session-token";

/**
 * The re-issue due for `token`, if any: `null` when the session turned out gone. A Redis failure
 * only costs the fresh token (logged; the next request retries), never the request.
 */
async function reissueFor(log: Logger, deps: Deps, token: string): Promise<Reissued | null | undefined> {
  const pending = deps.isolate.sessions.reissue(deps, token);
  if (!pending) return undefined;
  try {
    return await pending;
  } catch (err) {
    log.warn("session token re-issue failed", { err });
    return undefined;
  }
}

function attachReissued(res: Response, fresh: Reissued | undefined): void {
  if (!fresh?.live) return;
  res.headers.set(SESSION_TOKEN_HEADER, fresh.token);
  res.headers.set("cache-control", "no-store");
}

/**
 * The session of `token`, looked up with the caller's address (unknown legacy tokens are misses it
 * pays for: services/session-cache.ts). An address past its miss budget is a 429 with Retry-After.
 */
async function authenticate(deps: Deps, token: string, addressOf: () => string): Promise<SessionUser | null> {
  try {
    return await deps.isolate.sessions.authenticate(deps, token, addressOf);
  } catch (err) {
    if (err instanceof LegacyLookupRefused)
      throw new AppError("RATE_LIMITED", err.message, { retryAfterSeconds: err.retryAfterMs / 1000 });
    throw err;
  }
}

export const requireUser = createMiddleware<UserEnv>(async (c, next) => {
  const token = bearer(c.req.header("authorization"));
  const deps = c.get("deps");
  const user = token ? await authenticate(deps, token, () => limitAddress(c, deps.config)) : null;
  if (!user || !token) throw new AppError("UNAUTHORIZED", "not logged in");
  const fresh = await reissueFor(c.get("log"), deps, token);
  if (fresh === null) throw new AppError("UNAUTHORIZED", "not logged in");
  c.set("user", user);
  c.set("token", token);
  await next();
  attachReissued(c.res, fresh);
});

export const optionalUser = createMiddleware<MaybeUserEnv>(async (c, next) => {
  const token = bearer(c.req.header("authorization"));
  const deps = c.get("deps");
  let user: SessionUser | null = null;
  let fresh: Reissued | null | undefined;
  if (token) {
    try {
      user = await authenticate(deps, token, () => limitAddress(c, deps.config));
    } catch (err) {
      // Personalisation is optional: a Redis hiccup, or an address past its budget of unknown
      // tokens (not worth a log line each), degrades to anonymous, never to an error.
      if (!(err instanceof AppError && err.code === "RATE_LIMITED"))
        c.get("log").warn("optional session lookup failed", { err });
    }
    if (user) fresh = await reissueFor(c.get("log"), deps, token);
    if (fresh === null) user = null;
  }
  c.set("user", user);
  c.set("token", user ? token : null);
  await next();
  attachReissued(c.res, fresh ?? undefined);
});

/**
 * Does an Authorization header carry the operator secret as `Bearer <secret>` (the scheme in any
 * case, per RFC 9110; constant-time compare)? The bare secret is refused: the classic scheme-less
 * header is for user tokens only.
 */
export function isOperator(authorization: string | undefined, adminToken: string): boolean {
  const m = authorization === undefined ? null : /^Bearer +(\S+)\s*$/i.exec(authorization);
  return m?.[1] !== undefined && timingSafeEqual(m[1], adminToken);
}

export const requireOperator = createMiddleware<AppEnv>(async (c, next) => {
  const deps = c.get("deps");
  await checkOperatorAttempt(
    deps,
    limitAddress(c, deps.config),
    isOperator(c.req.header("authorization"), deps.config.ADMIN_TOKEN),
  );
  await next();
});

/**
 * An operator credential check from `address` (http/operator-attempts.ts): a refused address is a
 * 429 whatever it sent; a wrong credential counts against it (a 429 once over the limit, else 401).
 */
export async function checkOperatorAttempt(deps: Deps, address: string, valid: boolean): Promise<void> {
  const attempts = deps.isolate.operatorAttempts;
  const now = deps.clock.now();
  const refused = attempts.refusedFor(address, now);
  if (refused > 0)
    throw new AppError("RATE_LIMITED", "too many failed operator sign-ins from this address", {
      retryAfterSeconds: refused / 1000,
    });
  if (valid) return;
  const blocked = await attempts.failed(address, now);
  if (blocked > 0)
    throw new AppError("RATE_LIMITED", "too many failed operator sign-ins from this address", {
      retryAfterSeconds: blocked / 1000,
    });
  throw new AppError("UNAUTHORIZED", "operator credentials required");
}

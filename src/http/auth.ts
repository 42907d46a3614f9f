/**
 * Guards. `requireUser` resolves the session or answers 401; `optionalUser` resolves it when
 * present (public routes that personalise, e.g. `isLike`); `requireOperator` checks the configured
 * operator secret — user tokens never pass there. Sessions are resolved by the isolate's session
 * cache (services/session-cache.ts): a warm token costs no Redis call, a forged one none either;
 * the idle timeout slides in the background.
 */
import { createMiddleware } from "hono/factory";
import type { Deps } from "../deps.ts";
import { AppError } from "../errors.ts";
import type { SessionUser } from "../services/session.ts";
import type { AppEnv } from "../types.ts";
import { timingSafeEqual } from "../util/compare.ts";
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

export const requireUser = createMiddleware<UserEnv>(async (c, next) => {
  const token = bearer(c.req.header("authorization"));
  const deps = c.get("deps");
  const user = token ? await deps.isolate.sessions.authenticate(deps, token) : null;
  if (!user || !token) throw new AppError("UNAUTHORIZED", "not logged in");
  c.set("user", user);
  c.set("token", token);
  await next();
});

export const optionalUser = createMiddleware<MaybeUserEnv>(async (c, next) => {
  const token = bearer(c.req.header("authorization"));
  const deps = c.get("deps");
  let user: SessionUser | null = null;
  if (token) {
    try {
      user = await deps.isolate.sessions.authenticate(deps, token);
    } catch (err) {
      // Personalisation is optional: a Redis hiccup degrades to anonymous, never to an error.
      c.get("log").warn("optional session lookup failed", { err });
    }
  }
  c.set("user", user);
  c.set("token", user ? token : null);
  await next();
});

/** Does an Authorization header carry the operator secret (constant-time compare)? */
export function isOperator(authorization: string | undefined, adminToken: string): boolean {
  const token = bearer(authorization);
  return token !== undefined && token !== null && timingSafeEqual(token, adminToken);
}

export const requireOperator = createMiddleware<AppEnv>(async (c, next) => {
  const deps = c.get("deps");
  await checkOperatorAttempt(deps, limitAddress(c, deps.config), isOperator(c.req.header("authorization"), deps.config.ADMIN_TOKEN));
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
  if (refused > 0) throw new AppError("RATE_LIMITED", "too many failed operator sign-ins from this address", { retryAfterSeconds: refused / 1000 });
  if (valid) return;
  const blocked = await attempts.failed(address, now);
  if (blocked > 0) throw new AppError("RATE_LIMITED", "too many failed operator sign-ins from this address", { retryAfterSeconds: blocked / 1000 });
  throw new AppError("UNAUTHORIZED", "operator credentials required");
}

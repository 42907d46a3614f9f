/**
 * `verifyQstash`: every QStash callback is verified, every time (no dev bypass). The raw body is
 * read first (the signature covers its exact bytes) and the signature must name this exact URL
 * (`sub` claim = PUBLIC_URL + path), so a message signed for one internal route cannot be replayed
 * against another. Expired or not-yet-valid tokens fail in `Receiver.verify`; a token must also
 * carry every claim QStash signs (iss, sub, iat, nbf, exp, jti, body) — `Receiver.verify` enforces
 * exp/nbf only when present — and expire within MAX_TOKEN_LIFETIME_S of now.
 *
 * Replays: QStash signs each delivery attempt anew (a fresh `jti`), so a token id seen before is a
 * captured delivery sent again. Its id is marked once (one SET NX, kept until the token expires,
 * so the window is bounded by MAX_TOKEN_LIFETIME_S) and a second use is refused with 409 before
 * the handler runs. Not keyed by `Upstash-Message-Id`: that header is unsigned, and QStash's own
 * retry of a failed delivery reuses it.
 */
import { createMiddleware } from "hono/factory";
import { AppError } from "../errors.ts";
import { internalUrl } from "../queue/messages.ts";
import { keys } from "../redis/keys.ts";
import type { AppEnv } from "../types.ts";

export type SignedEnv = AppEnv & { Variables: { rawBody: string } };

/** Longest a delivery token may still be valid, s: QStash signs exp = now + 300; the rest is clock skew. */
export const MAX_TOKEN_LIFETIME_S = 600;

const JTI_RE = /^[A-Za-z0-9_-]{1,128}$/;

interface Claims {
  jti: string;
  exp: number;
}

/** The claims QStash always signs, or null when one is missing or malformed. The signature is checked before. */
function signedClaims(token: string): Claims | null {
  const part = token.split(".")[1];
  if (!part) return null;
  let c: Record<string, unknown>;
  try {
    const b64 = part.replace(/-/g, "+").replace(/_/g, "/");
    c = JSON.parse(atob(b64 + "===".slice((b64.length + 3) % 4))) as Record<string, unknown>;
  } catch {
    return null;
  }
  const num = (v: unknown) => typeof v === "number" && Number.isFinite(v);
  if (c.iss !== "Upstash" || typeof c.sub !== "string" || typeof c.body !== "string") return null;
  if (!num(c.iat) || !num(c.nbf) || !num(c.exp)) return null;
  if (typeof c.jti !== "string" || !JTI_RE.test(c.jti)) return null;
  return { jti: c.jti, exp: c.exp as number };
}

export const verifyQstash = createMiddleware<SignedEnv>(async (c, next) => {
  const signature = c.req.header("upstash-signature");
  if (!signature) throw new AppError("UNAUTHORIZED", "missing Upstash-Signature");
  const body = await c.req.text();
  const deps = c.get("deps");
  let valid = false;
  try {
    valid = await deps.receiver.verify({ signature, body, url: internalUrl(deps, c.req.path) });
  } catch {
    valid = false;
  }
  if (!valid) throw new AppError("UNAUTHORIZED", "invalid QStash signature");
  const claims = signedClaims(signature);
  if (!claims)
    throw new AppError(
      "UNAUTHORIZED",
      "QStash signature lacks a claim QStash signs (iss, sub, iat, nbf, exp, jti, body)",
    );
  // The wall clock, as Receiver.verify (jose) checks exp by it; not deps.clock, which tests shift.
  const left = Math.ceil(claims.exp - Date.now() / 1000);
  if (left > MAX_TOKEN_LIFETIME_S)
    throw new AppError("UNAUTHORIZED", `QStash signature valid for ${left} s; at most ${MAX_TOKEN_LIFETIME_S} s`);
  // Kept one second past the expiry, so the mark outlives every moment the token verifies.
  const first = await deps.redis.set(keys.processed("qstash-jti", claims.jti), "1", {
    nx: true,
    ex: Math.max(1, left + 1),
  });
  if (first === null) throw new AppError("CONFLICT", "this QStash delivery was already received (replayed signature)");
  c.set("rawBody", body);
  await next();
});

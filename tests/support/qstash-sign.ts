/**
 * Signs a callback the way QStash does (HS256 JWT, key = UTF-8 of the signing key), for tests that
 * call /internal routes directly: valid ones, ones signed with a wrong key, expired ones, ones
 * whose `sub` names another route, and ones missing a claim QStash always signs.
 */
import { SignJWT } from "jose";

export type QstashClaim = "iss" | "sub" | "iat" | "nbf" | "exp" | "jti" | "body";

export async function qstashSignature(opts: {
  key: string;
  url: string;
  body: string;
  nowSec?: number;
  expSec?: number;
  /** The token's id (default a fresh `jwt_<uuid>`, as QStash signs every delivery anew). */
  jti?: string;
  /** Claims left out (QStash signs them all; a forger may not). */
  omit?: readonly QstashClaim[];
}): Promise<string> {
  const now = opts.nowSec ?? Math.floor(Date.now() / 1000);
  const omit = new Set(opts.omit ?? []);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(opts.body)));
  const bodyHash = btoa(String.fromCharCode(...digest))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
  const jwt = new SignJWT(omit.has("body") ? {} : { body: bodyHash }).setProtectedHeader({ alg: "HS256", typ: "JWT" });
  if (!omit.has("iss")) jwt.setIssuer("Upstash");
  if (!omit.has("sub")) jwt.setSubject(opts.url);
  if (!omit.has("iat")) jwt.setIssuedAt(now);
  if (!omit.has("nbf")) jwt.setNotBefore(now);
  if (!omit.has("exp")) jwt.setExpirationTime(opts.expSec ?? now + 300);
  if (!omit.has("jti")) jwt.setJti(opts.jti ?? `jwt_${crypto.randomUUID()}`);
  return await jwt.sign(new TextEncoder().encode(opts.key));
}

/**
 * Signs a callback the way QStash does (HS256 JWT, key = UTF-8 of the signing key), for tests that
 * call /internal routes directly: valid ones, ones signed with a wrong key, expired ones, and
 * ones whose `sub` names another route.
 */
import { SignJWT } from "jose";

export async function qstashSignature(opts: {
  key: string;
  url: string;
  body: string;
  nowSec?: number;
  expSec?: number;
}): Promise<string> {
  const now = opts.nowSec ?? Math.floor(Date.now() / 1000);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(opts.body)));
  const bodyHash = btoa(String.fromCharCode(...digest))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
  return await new SignJWT({ body: bodyHash })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setIssuer("Upstash")
    .setSubject(opts.url)
    .setIssuedAt(now)
    .setNotBefore(now)
    .setExpirationTime(opts.expSec ?? now + 300)
    .setJti(`jwt_${crypto.randomUUID()}`)
    .sign(new TextEncoder().encode(opts.key));
}

/**
 * Payment webhook signatures: `x-payment-signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.body">`
 * (the Stripe scheme). The timestamp is signed too, so an old webhook cannot be replayed after
 * the tolerance window.
 */
import { timingSafeEqual } from "../util/compare.ts";

async function hmacHex(secret: string, message: string): Promise<string> {
  const key = await crypto.subtle.importKey("raw", new TextEncoder().encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const sig = await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(message));
  return [...new Uint8Array(sig)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

export async function signWebhook(secret: string, body: string, nowMs: number): Promise<string> {
  const t = Math.floor(nowMs / 1000);
  return `t=${t},v1=${await hmacHex(secret, `${t}.${body}`)}`;
}

export type WebhookCheck = { ok: true } | { ok: false; reason: "missing" | "malformed" | "expired" | "mismatch" };

export async function verifyWebhook(secret: string, header: string | undefined, body: string, nowMs: number, toleranceSeconds: number): Promise<WebhookCheck> {
  if (!header) return { ok: false, reason: "missing" };
  const parts = Object.fromEntries(header.split(",").map((kv) => kv.trim().split("=", 2) as [string, string]));
  const t = Number(parts.t);
  const v1 = parts.v1;
  if (!Number.isInteger(t) || !v1 || !/^[0-9a-f]{64}$/.test(v1)) return { ok: false, reason: "malformed" };
  if (Math.abs(nowMs / 1000 - t) > toleranceSeconds) return { ok: false, reason: "expired" };
  return timingSafeEqual(await hmacHex(secret, `${t}.${body}`), v1) ? { ok: true } : { ok: false, reason: "mismatch" };
}

/**
 * Payment webhook signatures: `x-payment-signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.body">`
 * (the Stripe scheme). The timestamp is signed too, so an old webhook cannot be replayed after
 * the tolerance window.
 */
import { hmacSha256Hex, timingSafeEqual } from "../util/crypto.ts";

const hmacHex = hmacSha256Hex;

export async function signWebhook(secret: string, body: string, nowMs: number): Promise<string> {
  const t = Math.floor(nowMs / 1000);
  return `t=${t},v1=${await hmacHex(secret, `${t}.${body}`)}`;
}

export type WebhookCheck = { ok: true } | { ok: false; reason: "missing" | "malformed" | "expired" | "mismatch" };

export async function verifyWebhook(
  secret: string,
  header: string | undefined,
  body: string,
  nowMs: number,
  toleranceSeconds: number,
): Promise<WebhookCheck> {
  if (!header) return { ok: false, reason: "missing" };
  const parts = Object.fromEntries(header.split(",").map((kv) => kv.trim().split("=", 2) as [string, string]));
  const t = Number(parts.t);
  const v1 = parts.v1;
  if (!Number.isInteger(t) || !v1 || !/^[0-9a-f]{64}$/.test(v1)) return { ok: false, reason: "malformed" };
  if (Math.abs(nowMs / 1000 - t) > toleranceSeconds) return { ok: false, reason: "expired" };
  return timingSafeEqual(await hmacHex(secret, `${t}.${body}`), v1) ? { ok: true } : { ok: false, reason: "mismatch" };
}

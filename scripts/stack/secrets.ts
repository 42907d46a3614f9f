/**
 * The dev stack's secrets: random once per checkout, kept in .local/ so they survive restarts (a
 * `.dev.vars` copied from .local/stack.env stays valid, and so do webhooks in flight across a restart).
 * `dir`: another local dir than .local (`npm run worker -- --dir DIR`).
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { LOCAL_DIR } from "./env-file.ts";

/** `prefix` + 32 random hex digits (128 bits). */
export function randomSecret(prefix: string): string {
  return `${prefix}${[...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

function persistedSecret(fileName: string, prefix: string, dir: string): string {
  const file = join(dir, fileName);
  if (existsSync(file)) {
    const t = readFileSync(file, "utf8").trim();
    if (t.length >= 32) return t;
  }
  mkdirSync(dir, { recursive: true });
  const secret = randomSecret(prefix);
  writeFileSync(file, `${secret}\n`, { mode: 0o600 });
  return secret;
}

export function localAdminToken(dir = LOCAL_DIR): string {
  return persistedSecret("admin-token", "adm_", dir);
}

/** SESSION_SECRET of the dev stack (src/env.ts has no default for it); kept so dev sessions survive restarts. */
export function localSessionSecret(dir = LOCAL_DIR): string {
  return persistedSecret("session-secret", "sess_", dir);
}

/** PAYMENT_WEBHOOK_SECRET of the dev stack (src/env.ts has no default for it). */
export function localPaymentWebhookSecret(dir = LOCAL_DIR): string {
  return persistedSecret("payment-webhook-secret", "whsec_", dir);
}

/**
 * The Web Crypto helpers every runtime shares (Bun, Deno, workerd: `crypto.subtle` only, no
 * node:crypto): hex encoding, SHA digests, HMAC-SHA256, random hex and a constant-time compare.
 * One copy; hand-written because each is a line over `crypto.subtle`, not worth a dependency.
 */

const encoder = new TextEncoder();

const bytesOf = (data: string | Uint8Array): Uint8Array<ArrayBuffer> =>
  typeof data === "string" ? encoder.encode(data) : (data as Uint8Array<ArrayBuffer>);

/** Lower-case hex of bytes. */
export function hex(data: ArrayBuffer | Uint8Array): string {
  let out = "";
  for (const b of data instanceof Uint8Array ? data : new Uint8Array(data)) out += b.toString(16).padStart(2, "0");
  return out;
}

/** SHA-1 hex (Redis script hashes; not for security). */
export async function sha1Hex(data: string | Uint8Array): Promise<string> {
  return hex(await crypto.subtle.digest("SHA-1", bytesOf(data)));
}

export async function sha256Hex(data: string | Uint8Array): Promise<string> {
  return hex(await crypto.subtle.digest("SHA-256", bytesOf(data)));
}

/** HMAC-SHA256 of `message` under `key` (raw bytes). */
export async function hmacSha256(
  key: string | Uint8Array | ArrayBuffer,
  message: string | Uint8Array,
): Promise<ArrayBuffer> {
  const raw = key instanceof ArrayBuffer ? new Uint8Array(key) : bytesOf(key);
  const k = await crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  return await crypto.subtle.sign("HMAC", k, bytesOf(message));
}

export async function hmacSha256Hex(
  key: string | Uint8Array | ArrayBuffer,
  message: string | Uint8Array,
): Promise<string> {
  return hex(await hmacSha256(key, message));
}

/** `bytes` random bytes as hex (2 × bytes characters). */
export function randomHex(bytes: number): string {
  return hex(crypto.getRandomValues(new Uint8Array(bytes)));
}

/**
 * Constant-time string equality: the time taken depends only on the lengths, never on where the
 * first difference is, so a caller cannot learn a secret (a login code) one character at a time.
 */
export function timingSafeEqual(a: string, b: string): boolean {
  const len = Math.max(a.length, b.length);
  let diff = a.length ^ b.length;
  for (let i = 0; i < len; i++) diff |= (a.charCodeAt(i) | 0) ^ (b.charCodeAt(i) | 0);
  return diff === 0;
}

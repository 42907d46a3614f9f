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

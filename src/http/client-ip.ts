import type { Context } from "hono";

/**
 * The caller's address, for per-IP limits and UV. Workers: `cf-connecting-ip` (set by Cloudflare,
 * not spoofable there). Behind a proxy we run: the first `x-forwarded-for` hop (TRUST_PROXY).
 * Bun/Deno: the socket address the entry passes as `{ clientIp }` in the fetch env argument.
 */
export function clientIp(c: Context, trustProxy: boolean): string {
  const cf = c.req.header("cf-connecting-ip");
  if (cf) return cf;
  if (trustProxy) {
    const xff = c.req.header("x-forwarded-for")?.split(",")[0]?.trim();
    if (xff) return xff;
  }
  const env = c.env as { clientIp?: unknown } | undefined;
  return typeof env?.clientIp === "string" ? env.clientIp : "unknown";
}

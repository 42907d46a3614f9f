import type { Context } from "hono";

/**
 * What an entry passes as the second argument of `app.fetch`: the client address as its runtime
 * knows it. Bun and Deno: the socket's peer address. Workers: `cf-connecting-ip`, which Cloudflare's
 * edge sets (overwriting anything the client sent), so it is read in src/entry/worker.ts only.
 */
export interface ClientEnv {
  clientIp?: string;
}

/** Longest textual IP address (IPv4-mapped IPv6): what a trusted proxy may hand us. */
const MAX_IP_LENGTH = 45;
const IP_CHARS = /^[0-9A-Fa-f:.]+$/;

/**
 * The caller's address, for per-IP limits and UV. It comes from the runtime (`{ clientIp }` from
 * the entry); no request header is believed, except the first `x-forwarded-for` hop when the
 * operator said a proxy of theirs sits in front (TRUST_PROXY) — that proxy must set the header,
 * not append to one the client sent. A hop that is not an address falls back to the runtime's.
 */
export function clientIp(c: Context, trustProxy: boolean): string {
  return clientIpOf(c.req.raw.headers, c.env as ClientEnv | undefined, trustProxy);
}

/** The same rule from the raw parts (the fast lane answers before Hono builds a Context). */
export function clientIpOf(headers: Headers, env: ClientEnv | undefined, trustProxy: boolean): string {
  if (trustProxy) {
    const xff = headers.get("x-forwarded-for");
    if (xff) {
      const comma = xff.indexOf(",");
      const first = (comma < 0 ? xff : xff.slice(0, comma)).trim();
      if (first.length > 0 && first.length <= MAX_IP_LENGTH && IP_CHARS.test(first)) return first;
    }
  }
  const ip = env?.clientIp;
  return typeof ip === "string" && ip.length > 0 ? ip : "unknown";
}

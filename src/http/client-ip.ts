import type { Context } from "hono";
import type { Config } from "../env.ts";

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

/**
 * The budget an address draws on: IPv4 as is; IPv6 by its first `prefixBits` (one customer's
 * subnet — a caller on IPv6 can rotate through 2^64 addresses of its /64, not through prefixes);
 * IPv4-mapped IPv6 as its IPv4 address; anything else (e.g. "unknown") as is.
 */
export function limitKeyOf(ip: string, prefixBits = 64): string {
  if (!ip.includes(":")) return ip;
  const lower = ip.toLowerCase();
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/.exec(lower);
  if (mapped?.[1]) return mapped[1];
  const [head = "", tail] = lower.split("::", 2);
  const left = head === "" ? [] : head.split(":");
  const right = tail === undefined || tail === "" ? [] : tail.split(":");
  const groups =
    tail === undefined
      ? left
      : [...left, ...Array<string>(Math.max(0, 8 - left.length - right.length)).fill("0"), ...right];
  if (groups.length !== 8 || !groups.every((g) => /^[0-9a-f]{1,4}$/.test(g))) return lower; // not plain IPv6: as is
  const kept = Math.ceil(prefixBits / 16);
  const out = groups.slice(0, kept).map((g, i) => {
    const bits = Math.min(16, prefixBits - 16 * i);
    const masked = Number.parseInt(g, 16) & ((0xffff << (16 - bits)) & 0xffff);
    return masked.toString(16);
  });
  return kept === 8 ? `${out.join(":")}/${prefixBits}` : `${out.join(":")}::/${prefixBits}`;
}

/** The caller's limit key (clientIp, then limitKeyOf with LIMIT_IPV6_PREFIX). */
export function limitAddress(c: Context, config: Pick<Config, "TRUST_PROXY" | "LIMIT_IPV6_PREFIX">): string {
  return limitKeyOf(clientIp(c, config.TRUST_PROXY), config.LIMIT_IPV6_PREFIX);
}

/** The same from the raw parts (the fast lane). */
export function limitAddressOf(
  headers: Headers,
  env: ClientEnv | undefined,
  config: Pick<Config, "TRUST_PROXY" | "LIMIT_IPV6_PREFIX">,
): string {
  return limitKeyOf(clientIpOf(headers, env, config.TRUST_PROXY), config.LIMIT_IPV6_PREFIX);
}

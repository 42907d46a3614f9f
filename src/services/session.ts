/**
 * Sessions: `login:token:{token}` hashes holding the public user fields. Tokens are 128-bit
 * random values (hex), so they are unguessable and safe to use as the lookup key itself.
 */
import type { RedisPort } from "../deps.ts";
import { keys } from "../redis/keys.ts";

export interface SessionUser {
  id: number;
  nickName: string;
  icon: string;
}

/** 16 random bytes → 32 hex chars. */
export function newToken(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  let out = "";
  for (const b of bytes) out += b.toString(16).padStart(2, "0");
  return out;
}

/** Stores a session; `ttlSeconds` is the idle timeout that each authenticated request renews. */
export async function createSession(redis: RedisPort, user: SessionUser, ttlSeconds: number): Promise<string> {
  const token = newToken();
  const key = keys.loginToken(token);
  const tx = redis.multi();
  tx.hset(key, { id: String(user.id), nickName: user.nickName, icon: user.icon });
  tx.expire(key, ttlSeconds);
  await tx.exec();
  return token;
}

export const TOKEN_RE = /^[0-9a-f]{32}$/;

/**
 * Resolves a token to its user and slides the session's TTL, in one round trip: an explicit
 * pipeline, because the auto-pipelining client batches reads and writes separately (HMGET and
 * EXPIRE issued together would still cost two requests).
 */
export async function readSession(redis: RedisPort, token: string, ttlSeconds: number): Promise<SessionUser | null> {
  if (!TOKEN_RE.test(token)) return null;
  const key = keys.loginToken(token);
  const [fields, renewed] = await redis
    .pipeline()
    .hmget<{ id: string | number | null; nickName: string | null; icon: string | null }>(key, "id", "nickName", "icon")
    .expire(key, ttlSeconds)
    .exec();
  if (!renewed || !fields || fields.id === null || fields.id === undefined) return null;
  return { id: Number(fields.id), nickName: String(fields.nickName ?? ""), icon: String(fields.icon ?? "") };
}

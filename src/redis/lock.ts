/**
 * A token lock in Redis (`SET key token NX PX ttl`, released by compare-and-delete), for jobs that
 * must not overlap across isolates and for single-rebuild cache loads. Not a fencing lock: the
 * guarded work must itself be idempotent, the lock only keeps it from running twice at once.
 */
import type { Redis } from "@upstash/redis";
import { keys } from "./keys.ts";
import { scriptsFor } from "./scripts.ts";

export interface LockHandle {
  key: string;
  token: string;
  release(): Promise<boolean>;
  extend(ttlMs: number): Promise<boolean>;
}

/** Tries once; resolves to a handle when acquired, `null` when someone else holds the lock. */
export async function tryLock(redis: Redis, name: string, ttlMs: number): Promise<LockHandle | null> {
  return await tryLockKey(redis, keys.lock(name), ttlMs);
}

/** `tryLock` under a key built elsewhere in keys.ts (e.g. `keys.cacheLock`), not from a lock name. */
export async function tryLockKey(redis: Redis, key: string, ttlMs: number): Promise<LockHandle | null> {
  const token = crypto.randomUUID();
  const res = await redis.set(key, token, { nx: true, px: ttlMs });
  if (res !== "OK") return null;
  return lockHandle(redis, key, token);
}

/** The handle of a lock taken elsewhere (e.g. inside a script: lua/cache-probe.lua) under `key` with `token`. */
export function lockHandle(redis: Redis, key: string, token: string): LockHandle {
  const scripts = scriptsFor(redis);
  return {
    key,
    token,
    release: async () => (await scripts.unlock.exec([key], [token])) === 1,
    extend: async (ms: number) => (await scripts.extendLock.exec([key], [token, String(ms)])) === 1,
  };
}

/** Runs `fn` under the lock, or returns `{ ran: false }` at once if it is held elsewhere. */
export async function withLock<T>(
  redis: Redis,
  name: string,
  ttlMs: number,
  fn: () => Promise<T>,
): Promise<{ ran: true; value: T } | { ran: false }> {
  const lock = await tryLock(redis, name, ttlMs);
  if (!lock) return { ran: false };
  try {
    return { ran: true, value: await fn() };
  } finally {
    await lock.release();
  }
}

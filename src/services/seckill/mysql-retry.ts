/**
 * Lock conflicts are part of a hot sale, not errors: every writer, closer and payment touches the
 * same few rows. A deadlock (errno 1213: MySQL rolled our transaction back) or a lock wait timeout
 * (errno 1205: our statement was rolled back) is retried here, bounded and jittered, before the
 * delivery fails — and counted, so operators and the bench can see them.
 */
import type { Deps } from "../../deps.ts";

/** errno of a MySQL lock conflict in an error from @planetscale/database, else undefined. */
export function lockConflictErrno(err: unknown): 1213 | 1205 | undefined {
  const text =
    err instanceof Error
      ? `${err.message} ${String((err as { body?: { message?: string } }).body?.message ?? "")}`
      : String(err);
  if (/\berrno 1213\b|deadlock found/i.test(text)) return 1213;
  if (/\berrno 1205\b|lock wait timeout/i.test(text)) return 1205;
  return undefined;
}

export interface LockConflictStats {
  /** Conflicts seen and retried. */
  retried: number;
  /** Conflicts that outlasted every attempt (the caller's delivery fails, QStash retries it). */
  exhausted: number;
}

export const LOCK_RETRY_ATTEMPTS = 6;
const BASE_DELAY_MS = 5;
const MAX_DELAY_MS = 400;

/**
 * Runs `fn` (a whole MySQL transaction: after a deadlock the transaction is gone and must be
 * redone from the start) and retries it on lock conflicts with full-jitter exponential backoff
 * (5 ms · 2^n, capped at 400 ms). Other errors pass through at once.
 */
export async function withLockRetry<T>(
  deps: Pick<Deps, "log">,
  stats: LockConflictStats,
  what: string,
  fn: () => Promise<T>,
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      const errno = lockConflictErrno(err);
      if (errno === undefined) throw err;
      if (attempt >= LOCK_RETRY_ATTEMPTS) {
        stats.exhausted++;
        deps.log.warn("MySQL lock conflict outlasted the retries; the delivery will be retried", {
          what,
          errno,
          attempts: attempt,
        });
        throw err;
      }
      stats.retried++;
      const cap = Math.min(MAX_DELAY_MS, BASE_DELAY_MS * 2 ** attempt);
      await new Promise((r) => setTimeout(r, Math.random() * cap));
    }
  }
}

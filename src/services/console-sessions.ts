/**
 * The server side of console sessions (console/session.ts signs and verifies the cookie without
 * I/O): a signed-out session's nonce is revoked until its cookie would have expired, and "sign out
 * everyone" stores an epoch before which every session is void. Both live in Redis, so every
 * isolate honours them; checking costs one MGET per console request.
 */
import type { Deps } from "../deps.ts";
import { keys } from "../redis/keys.ts";

/** What the checks need of a verified session (console/session.ts ConsoleSession). */
export interface SessionRef {
  nonce: string;
  issuedMs: number;
  expiresMs: number;
}

/**
 * Is a verified session still alive server-side: not signed out and not issued before the last
 * "revoke all"? With Redis unreachable, reads (GET) are answered — the console is most needed
 * during an outage — and state-changing requests are refused.
 */
export async function consoleSessionAlive(deps: Pick<Deps, "redis">, s: SessionRef, method: string): Promise<boolean> {
  try {
    const [revoked, epoch] = await deps.redis.mget<(string | number | null)[]>(
      keys.consoleRevoked(s.nonce),
      keys.consoleEpoch(),
    );
    return revoked === null && (epoch === null || s.issuedMs >= Number(epoch));
  } catch {
    return method === "GET";
  }
}

/** Signs one session out everywhere (also a copy of its cookie), until it would have expired anyway. */
export async function revokeConsoleSession(deps: Pick<Deps, "redis" | "clock">, s: SessionRef): Promise<void> {
  await deps.redis.set(keys.consoleRevoked(s.nonce), "1", { px: Math.max(1000, s.expiresMs - deps.clock.now()) });
}

/** Voids every console session issued before now, in every isolate. */
export async function revokeAllConsoleSessions(deps: Pick<Deps, "redis" | "clock">): Promise<void> {
  await deps.redis.set(keys.consoleEpoch(), String(deps.clock.now()));
}

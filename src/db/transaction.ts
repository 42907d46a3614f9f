/**
 * The MySQL port (`deps.db`): @planetscale/database's Client for single statements, and
 * transactions that end the moment they should. The SDK's own `transaction()` sends BEGIN, the
 * statements and COMMIT on one session (one HTTP round trip each) and, when one fails, ROLLBACK
 * through the same guarded fetch: refused without a call while the MySQL breaker is open, queued
 * on the session behind a statement still running, and masking the first error when it fails
 * itself. A lost ROLLBACK leaves the session holding a connection and its row locks until the
 * server's own timeout (PlanetScale: 20 s per transaction). Here instead:
 * - the whole transaction runs under MYSQL_TRANSACTION_TIMEOUT_MS; when it passes, the statement
 *   in flight is abandoned (its request aborted: the server stops it) and the caller gets a 503;
 * - whenever the transaction does not commit, ROLLBACK goes out at once on its session, past the
 *   breaker, under its own short deadline (ROLLBACK_TIMEOUT_MS), and the caller keeps its error.
 */
import { Client, Connection } from "@planetscale/database";
import { DependencyUnavailableError, type Guard } from "../resilience.ts";
import type { Logger } from "../log.ts";

/** Runs one statement: the SDK's `execute` (a fresh session per call outside a transaction). */
export type DbExecutor = Pick<Client, "execute">;

export interface DbPort extends DbExecutor {
  /**
   * BEGIN, `fn`, COMMIT on one session (one MySQL connection). Rolled back when `fn` throws, a
   * statement fails or the transaction's deadline passes; the error is then rethrown (a deadline
   * is DependencyUnavailableError "mysql" timeout). `tx` refuses statements once that happened.
   */
  transaction<T>(fn: (tx: DbExecutor) => Promise<T>): Promise<T>;
}

/** The ROLLBACK's own deadline, ms (at most the statement deadline): it only releases locks. */
export const ROLLBACK_TIMEOUT_MS = 1_000;

export interface DbPortOptions {
  url: string;
  /** The MySQL guard: statements run through its fetch (deadline + breaker). */
  guard: Guard;
  /** The transport under the guard (tests wrap it); the global fetch, looked up per call, when absent. */
  fetch?: typeof fetch;
  transactionTimeoutMs: number;
  log: Logger;
}

export function createDbPort(opts: DbPortOptions): DbPort {
  const guarded = opts.guard.fetch(opts.fetch);
  const client = new Client({ url: opts.url, fetch: guarded });
  const rollbackMs = Math.min(ROLLBACK_TIMEOUT_MS, opts.guard.opts.timeoutMs);
  return {
    execute: ((...args: Parameters<DbExecutor["execute"]>) => client.execute(...args)) as DbExecutor["execute"],
    transaction: <T>(fn: (tx: DbExecutor) => Promise<T>) => runTransaction(opts, guarded, rollbackMs, fn),
  };
}

async function runTransaction<T>(
  opts: DbPortOptions,
  guarded: typeof fetch,
  rollbackMs: number,
  fn: (tx: DbExecutor) => Promise<T>,
): Promise<T> {
  const deadline = new AbortController();
  const expired = () =>
    new DependencyUnavailableError(
      "mysql",
      "timeout",
      opts.guard.retryAfterMs(),
      new Error(`transaction exceeded ${opts.transactionTimeoutMs} ms`),
    );
  let rollingBack = false;
  // One Connection keeps the session; its transport switches from the guarded fetch (statements,
  // aborted by the deadline) to the plain one for the ROLLBACK.
  const conn = new Connection({
    url: opts.url,
    fetch: (input, init) =>
      rollingBack
        ? (opts.fetch ?? fetch)(input, { ...init, signal: AbortSignal.timeout(rollbackMs) })
        : guarded(input, { ...init, signal: deadline.signal }),
  });
  const passed = new Promise<never>((_, reject) => {
    deadline.signal.addEventListener("abort", () => reject(expired()), { once: true });
  });
  passed.catch(() => {});
  const timer = setTimeout(() => deadline.abort(), opts.transactionTimeoutMs);
  const within = <R>(p: Promise<R>): Promise<R> => {
    p.catch(() => {}); // the race below reports; a statement abandoned at the deadline rejects unobserved
    return Promise.race([p, passed]);
  };
  const tx: DbExecutor = {
    execute: ((...args: Parameters<DbExecutor["execute"]>) =>
      deadline.signal.aborted ? Promise.reject(expired()) : conn.execute(...args)) as DbExecutor["execute"],
  };
  let begun = false;
  try {
    await within(conn.execute("BEGIN"));
    begun = true;
    const result = await within(fn(tx));
    await within(conn.execute("COMMIT"));
    return result;
  } catch (err) {
    // Abandon whatever is still in flight, then end the session (when BEGIN never answered, no
    // session is known: the server ends it when its request is aborted, or at its own timeout).
    deadline.abort();
    if (begun) {
      rollingBack = true;
      await rollback(conn, opts.log);
    }
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

async function rollback(conn: Connection, log: Logger): Promise<void> {
  try {
    await conn.execute("ROLLBACK");
  } catch (err) {
    // The server still ends the transaction: at the aborted request, or at its transaction timeout.
    log.warn("MySQL ROLLBACK failed; the server's transaction timeout will end the transaction", { err });
  }
}

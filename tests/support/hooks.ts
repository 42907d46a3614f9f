/**
 * Interposition around the db port, for deterministic race tests: run `fn` right after the first
 * `execute` whose SQL, arguments and result match, before its result is handed back to the caller. The
 * engine stays real and the call itself is unchanged; only the moment the caller resumes moves,
 * which is exactly "something else happened between your read and your next step".
 */
import type { Deps } from "../../src/deps.ts";

export interface QueryHook {
  /** The hooked deps (db.execute wrapped; everything else shared). */
  deps: Deps;
  /** Resolves with fn's result once the hook has fired. */
  fired: Promise<unknown>;
}

type ExecuteResult = Awaited<ReturnType<Deps["db"]["execute"]>>;

export function afterQuery(
  deps: Deps,
  match: (sql: string, args: unknown[], result: ExecuteResult) => boolean,
  fn: () => Promise<unknown>,
): QueryHook {
  let armed = true;
  let resolve!: (v: unknown) => void;
  let reject!: (e: unknown) => void;
  const fired = new Promise<unknown>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  const db: Deps["db"] = {
    execute: (async (sql: string, args?: unknown) => {
      const result = await deps.db.execute(sql, args as never);
      if (armed && match(sql, Array.isArray(args) ? args : [], result)) {
        armed = false;
        try {
          resolve(await fn());
        } catch (err) {
          reject(err);
          throw err;
        }
      }
      return result;
    }) as Deps["db"]["execute"],
    transaction: ((f: Parameters<Deps["db"]["transaction"]>[0]) => deps.db.transaction(f)) as Deps["db"]["transaction"],
  };
  return { deps: { ...deps, db }, fired };
}

/**
 * The same deps with `pause()` awaited after every db.execute result arrives: reply latency of
 * the MySQL path, so whatever the caller does next lands later and concurrent work can interleave
 * between its reads and its writes (windows a fast local engine would otherwise keep tiny).
 */
export function withReplyLatency(deps: Deps, pause: () => Promise<void>): Deps {
  const db: Deps["db"] = {
    execute: (async (sql: string, args?: unknown) => {
      const result = await deps.db.execute(sql, args as never);
      await pause();
      return result;
    }) as Deps["db"]["execute"],
    transaction: ((f: Parameters<Deps["db"]["transaction"]>[0]) => deps.db.transaction(f)) as Deps["db"]["transaction"],
  };
  return { ...deps, db };
}

/**
 * Which runtime serves this isolate, and what its rules allow. The entry declares it
 * (src/entry/*); services and the isolate's memory read the capability, never `typeof` a global.
 *
 * `sharesIo`: may one request await a promise that another request's I/O settles?
 *   - Bun, Deno: yes. One process serves every request on one event loop, so work in flight can
 *     be joined: concurrent reservations share one `/pipeline` round trip (redis/script-batch.ts),
 *     concurrent misses of a key share one load, callers join a running sync or lease.
 *   - workerd: no. A promise settled by another request's fetch leaves the waiting request with
 *     no I/O of its own: the runtime calls it hung ("…code had hung and would never generate a
 *     response"), or cancels its continuation when the starting request ends ("A promise was
 *     resolved or rejected from a different request context…"). There every request does its
 *     own I/O; what it learns may still land in the isolate's memory for later requests to read
 *     synchronously, and upkeep runs in the `waitUntil` of the request that started it, awaited
 *     by nobody else.
 */
export type RuntimeName = "bun" | "deno" | "workerd";

export interface Runtime {
  readonly name: RuntimeName;
  readonly sharesIo: boolean;
  /**
   * Copying a Headers object is the cheap way to give a response a template's headers (Bun);
   * elsewhere setting them one by one on the new response is (src/http/headers.ts, measured).
   */
  readonly headersByCopy: boolean;
}

export const runtimes = {
  bun: { name: "bun", sharesIo: true, headersByCopy: true },
  deno: { name: "deno", sharesIo: true, headersByCopy: false },
  workerd: { name: "workerd", sharesIo: false, headersByCopy: false },
} as const satisfies Record<RuntimeName, Runtime>;

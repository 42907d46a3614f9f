/**
 * Reads that may come from the read region (`deps.redisRead`, docs/decisions/read-replicas.md).
 * The region answers with this isolate's writes included (sync token, src/deps.ts); when it
 * fails — down, or not caught up within its bound — the same read goes to the primary, so a
 * region never turns a read that would have succeeded into an error. Without a region this is
 * one plain call on the primary.
 */
import type { Deps, RedisPort } from "../deps.ts";

export async function readNearest<T>(deps: Deps, read: (redis: RedisPort) => Promise<T>): Promise<T> {
  const region = deps.redisRead;
  if (region === null) return await read(deps.redis);
  try {
    return await read(region);
  } catch (err) {
    deps.log.warn("read region failed; reading the primary", { err });
    return await read(deps.redis);
  }
}

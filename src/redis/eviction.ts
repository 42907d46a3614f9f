/**
 * What the service needs from a Redis database's eviction setting (docs/decisions/redis-eviction.md):
 * `noeviction`. An evicting database may drop an outbox entry, a buyers set or a stock key under
 * memory pressure, losing or overselling what was acknowledged; a full `noeviction` database
 * refuses writes instead ("OOM command not allowed"), which the service answers with 503.
 *
 * `checkEviction` asks the database (`CONFIG GET maxmemory-policy`): the policy when it is
 * `noeviction`; null when the database will not say (Upstash may refuse CONFIG: the deploy guide's
 * checklist covers it); EvictingRedisError for any other policy. The Bun and Deno entries run it for
 * the main and every shard database before serving.
 */
import type { Deps, RedisPort } from "../deps.ts";

export class EvictingRedisError extends Error {
  override name = "EvictingRedisError";
}

export async function checkEviction(redis: RedisPort, name = "redis"): Promise<string | null> {
  let reply: unknown;
  try {
    reply = await redis.exec(["CONFIG", "GET", "maxmemory-policy"]);
  } catch {
    return null;
  }
  const policy = Array.isArray(reply)
    ? reply[1]
    : reply && typeof reply === "object"
      ? (reply as Record<string, unknown>)["maxmemory-policy"]
      : undefined;
  if (typeof policy !== "string" || policy === "") return null;
  if (policy !== "noeviction")
    throw new EvictingRedisError(
      `${name}: maxmemory-policy is ${policy}; the service needs noeviction (an evicted outbox entry, buyers set or stock key loses or oversells acknowledged orders). Turn eviction off for this database.`,
    );
  return policy;
}

/**
 * The main database and every seckill shard. Refuses (EvictingRedisError) if any evicts; a
 * database that will not say is logged once, as a reminder of the deploy checklist.
 */
export async function checkEvictionAll(deps: Pick<Deps, "redis" | "seckillShards" | "log">): Promise<void> {
  const dbs: [string, RedisPort][] = [
    ["main redis", deps.redis],
    ...deps.seckillShards.map((r, i): [string, RedisPort] => [`seckill shard ${i}`, r]),
  ];
  for (const [name, redis] of dbs) {
    if ((await checkEviction(redis, name)) === null)
      deps.log.warn("redis eviction policy unknown: make sure eviction is off (docs/deploying.md)", { database: name });
  }
}

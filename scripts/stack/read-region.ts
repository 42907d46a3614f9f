/**
 * A local read region, as Upstash Global has them: a second real redis-server replicating the
 * primary (`replicaof`, read-only) through a holdable replication link (replication-link.ts),
 * behind its own Upstash-REST stand-in in replica mode, which honours sync tokens: a request
 * carrying the primary's offset token is answered once the replica has applied that offset
 * (upstash-rest.ts). Optionally at its own distance (a latency proxy in front of its stand-in).
 * The primary's stand-in must answer with offset tokens (`syncTokens: "offset"`): startStack's
 * `readRegion` does that for the main one; `primaryRest: true` starts such a stand-in here (tests
 * that attach a region to a running stack).
 */
import { join } from "node:path";
import { type Engine, startRedis } from "./engines.ts";
import { type Distance, type LatencyProxy, startLatencyProxy } from "./latency-proxy.ts";
import { type ReplicationLink, startReplicationLink } from "./replication-link.ts";
import { RespClient } from "./resp.ts";
import { startUpstashRest, type UpstashRestServer } from "./upstash-rest.ts";

export interface ReadRegionOptions {
  primary: { host: string; port: number };
  /** The replica's data directory. */
  dir: string;
  /** The REST token of the region (Upstash: the database's token). */
  token: string;
  /** The region this far from the app (a latency proxy in front of its stand-in); default: near. */
  distance?: Distance;
  /** Also start a stand-in with offset tokens in front of the primary (see the file comment). */
  primaryRest?: boolean;
  /** Longest a replica request waits for its sync token, ms (default 2000). */
  maxWaitMs?: number;
}

export interface ReadRegion {
  replica: Engine;
  link: ReplicationLink;
  /** The replica's stand-in (its stats count what reached the region). */
  rest: UpstashRestServer;
  /** With `primaryRest`: the primary's offset-token stand-in. */
  primaryRest?: UpstashRestServer;
  proxy?: LatencyProxy;
  /** UPSTASH_REDIS_READ_URL/_TOKEN (the proxy's URL when far), and with `primaryRest` UPSTASH_REDIS_REST_URL. */
  env: Record<string, string>;
  /** Resolves once the replica has applied everything the primary had when called (link released). */
  caughtUp(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

function field(info: string, name: string): string | undefined {
  return new RegExp(`^${name}:(.*)$`, "m").exec(info)?.[1]?.trim();
}

async function info(c: RespClient): Promise<string> {
  const v = await c.command(["INFO", "replication"]);
  return v instanceof Buffer ? v.toString("latin1") : String(v);
}

export async function startReadRegion(opts: ReadRegionOptions): Promise<ReadRegion> {
  const started: { stop(): Promise<void> }[] = [];
  const stopAll = async () => {
    for (const s of started.reverse()) await s.stop().catch(() => {});
  };
  try {
    const link = await startReplicationLink(opts.primary);
    started.push(link);
    const replica = await startRedis({
      dir: join(opts.dir, "replica"),
      args: ["--replicaof", link.host, String(link.port), "--replica-read-only", "yes"],
    });
    started.push(replica);
    const primaryClient = new RespClient({ host: opts.primary.host, port: opts.primary.port });
    const replicaClient = new RespClient({ host: replica.host, port: replica.port });
    started.push({ stop: () => primaryClient.close() }, { stop: () => replicaClient.close() });
    const caughtUp = async (timeoutMs = 20_000) => {
      const want = Number(field(await info(primaryClient), "master_repl_offset") ?? 0);
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const r = await info(replicaClient);
        if (field(r, "master_link_status") === "up" && Number(field(r, "slave_repl_offset") ?? -1) >= want) return;
        if (Date.now() > deadline) throw new Error(`read region: replica not in sync within ${timeoutMs} ms`);
        await new Promise((res) => setTimeout(res, 20));
      }
    };
    await caughtUp();
    const rest = await startUpstashRest({
      redisHost: replica.host,
      redisPort: replica.port,
      token: opts.token,
      replica: { maxWaitMs: opts.maxWaitMs },
    });
    started.push(rest);
    const primaryRest = opts.primaryRest
      ? await startUpstashRest({
          redisHost: opts.primary.host,
          redisPort: opts.primary.port,
          token: opts.token,
          syncTokens: "offset",
        })
      : undefined;
    if (primaryRest) started.push(primaryRest);
    const far = opts.distance !== undefined && (opts.distance.oneWayMs > 0 || (opts.distance.jitterMs ?? 0) > 0);
    const proxy = far && opts.distance ? startLatencyProxy(rest.url, opts.distance) : undefined;
    if (proxy) started.push(proxy);
    const env: Record<string, string> = {
      UPSTASH_REDIS_READ_URL: proxy?.url ?? rest.url,
      UPSTASH_REDIS_READ_TOKEN: opts.token,
    };
    if (primaryRest) env.UPSTASH_REDIS_REST_URL = primaryRest.url;
    return { replica, link, rest, primaryRest, proxy, env, caughtUp, stop: stopAll };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

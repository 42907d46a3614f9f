/**
 * `npm run stack` — redis-server, MariaDB and the three stand-ins in the foreground, data under
 * .local/data, settings in .local/stack.env. Ctrl-C / SIGTERM stops everything it started.
 *
 *   --fresh                          remove .local/data first
 *   --seckill-shards N               N more Redis databases (redis-server + Upstash-REST stand-in
 *                                    each), written as SECKILL_SHARD_URLS / SECKILL_SHARD_TOKENS
 *   --shard-commands-per-second N    cap each shard stand-in at N commands per second, answering
 *                                    over it like a throttled Upstash database (benches; default: none)
 *   --rtt MS [--jitter MS]           every dependency (REST, PlanetScale HTTP, QStash, shards) MS ms
 *                                    round trip away: latency proxies hold each leg MS/2 ms (+ up to
 *                                    --jitter ms each) in front of the stand-ins (default 0: direct)
 */
import { parseArgs } from "node:util";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { describeDistance, startStack, type Stack } from "./index.ts";
import type { Distance } from "./latency-proxy.ts";
import { pickPorts, pickShardPorts } from "./dev-ports.ts";
import { LOCAL_DIR, STACK_ENV_FILE, writeStackEnv } from "./env-file.ts";
import { localAdminToken, localPaymentWebhookSecret, localSessionSecret } from "./secrets.ts";
import { MAX_LOCAL_SHARDS } from "./shards.ts";

export const DATA_DIR = join(LOCAL_DIR, "data");
const say = (m: string) => console.error(`[stack] ${m}`);

export interface DevStackOptions {
  fresh: boolean;
  /** Seckill shard databases beside the main Redis (default 0). */
  seckillShards?: number;
  /** Command-rate cap of each shard stand-in, commands per second (default: none). */
  shardCommandsPerSecond?: number;
  /** Every dependency this far away (latency proxies; default: none). */
  distance?: Distance;
  /**
   * The stack's own folder instead of .local (a test beside a developer's stack): data in `<dir>/data`,
   * settings in `<dir>/stack.env`, the persisted secrets in `<dir>/` (default .local).
   */
  localDir?: string;
  /** Every port from the kernel instead of the memorable DEV_PORTS (default false). */
  freePorts?: boolean;
  /** The app's port (PORT and PUBLIC_URL of the settings); default DEV_PORTS.app or a free one. */
  appPort?: number;
}

/** parseArgs options of the shard flags, shared by `npm run stack` and `npm run dev`. */
export const SHARD_ARG_OPTIONS = {
  "seckill-shards": { type: "string", default: "0" },
  "shard-commands-per-second": { type: "string", default: "0" },
} as const;

/** parseArgs options of the distance flags (milliseconds), shared by `npm run stack`, `npm run dev` and `npm run worker`. */
export const DISTANCE_ARG_OPTIONS = {
  rtt: { type: "string", default: "0" },
  jitter: { type: "string", default: "0" },
} as const;

/** Largest --rtt and --jitter, ms. */
export const MAX_DISTANCE_FLAG_MS = 10_000;

/** An integer flag's value in 0..max; exits with a message on a bad value. */
function int(flag: string, raw: string | undefined, max: number): number {
  const v = Number(raw ?? "0");
  if (!Number.isInteger(v) || v < 0 || v > max) {
    console.error(`--${flag} must be an integer from 0 to ${max}, got ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return v;
}

/** The distance flags, validated: one-way = rtt / 2; no distance when both are 0. Exits on a bad value. */
export function distanceArgs(values: { rtt?: string; jitter?: string }): Pick<DevStackOptions, "distance"> {
  const rtt = int("rtt", values.rtt, MAX_DISTANCE_FLAG_MS);
  const jitter = int("jitter", values.jitter, MAX_DISTANCE_FLAG_MS);
  return rtt === 0 && jitter === 0 ? {} : { distance: { oneWayMs: rtt / 2, jitterMs: jitter } };
}

/** The shard flags' values, validated; exits with a message on a bad value. */
export function shardArgs(values: {
  "seckill-shards"?: string;
  "shard-commands-per-second"?: string;
}): Pick<DevStackOptions, "seckillShards" | "shardCommandsPerSecond"> {
  return {
    seckillShards: int("seckill-shards", values["seckill-shards"], MAX_LOCAL_SHARDS),
    shardCommandsPerSecond: int("shard-commands-per-second", values["shard-commands-per-second"], 1_000_000_000),
  };
}

/** Starts the persistent developer stack and writes .local/stack.env (or `<localDir>/stack.env`). */
export async function startDevStack(
  opts: DevStackOptions,
): Promise<{ stack: Stack; appPort: number; stackEnvFile: string }> {
  const localDir = opts.localDir ?? LOCAL_DIR;
  const dataDir = opts.localDir ? join(opts.localDir, "data") : DATA_DIR;
  const stackEnvFile = opts.localDir ? join(opts.localDir, "stack.env") : STACK_ENV_FILE;
  if (opts.fresh) {
    say(`--fresh: removing ${dataDir}`);
    rmSync(dataDir, { recursive: true, force: true });
  }
  const preferred = !opts.freePorts;
  const ports = await pickPorts(say, preferred);
  if (opts.appPort !== undefined) ports.app = opts.appPort;
  const seckillShards = opts.seckillShards ?? 0;
  if (seckillShards === 0 && (opts.shardCommandsPerSecond ?? 0) > 0)
    say("--shard-commands-per-second has no effect without --seckill-shards N");
  const stack = await startStack({
    seckillShards,
    shardCommandsPerSecond: opts.shardCommandsPerSecond,
    shardPorts: seckillShards > 0 ? await pickShardPorts(seckillShards, say, preferred) : undefined,
    dir: dataDir,
    persist: true,
    ports,
    adminToken: localAdminToken(localDir),
    paymentWebhookSecret: localPaymentWebhookSecret(localDir),
    sessionSecret: localSessionSecret(localDir),
    distance: opts.distance,
    publicUrl: `http://127.0.0.1:${ports.app}`,
    log: say,
  });
  writeStackEnv({ ...stack.env, PORT: String(ports.app) }, stackEnvFile);
  return { stack, appPort: ports.app, stackEnvFile };
}

export function printStack(stack: Stack, stackEnvFile = STACK_ENV_FILE): void {
  const e = stack.env;
  console.error(
    [
      "",
      "  Local stack (real engines behind protocol-compatible stand-ins):",
      `    Upstash Redis REST  ${e.UPSTASH_REDIS_REST_URL}   → redis-server ${e.LOCAL_REDIS_URL}`,
      `    PlanetScale HTTP    ${(e.DATABASE_URL ?? "").replace(/\/\/[^@]*@/, "//")}   → MariaDB ${e.LOCAL_MYSQL_URL}`,
      `    QStash              ${e.QSTASH_URL}`,
      ...stack.shards.map((s, i) => {
        const cap = s.rest.limits().commandsPerSecond;
        const label = `seckill shard ${i + 1}`.padEnd(19);
        return `    ${label} ${s.env.url}   → redis-server redis://${s.redis.host}:${s.redis.port}${cap === null ? "" : `   (cap ${cap} commands/s)`}`;
      }),
      ...(stack.shards.length > 0
        ? [`                        (SECKILL_SHARD_URLS / SECKILL_SHARD_TOKENS: ${stack.shards.length} shards)`]
        : []),
      ...(stack.distance
        ? [
            `    distance            ${describeDistance(stack.distance.current)}: the URLs above are latency`,
            `                        proxies in front of the stand-ins (REST ${stack.rest.url}, …); QStash's callbacks go direct`,
          ]
        : []),
      `    settings            ${stackEnvFile}`,
      "",
    ].join("\n"),
  );
}

/** Resolves on the first SIGINT/SIGTERM (and ignores repeats while shutting down). */
export function untilSignal(): Promise<string> {
  return new Promise((resolve) => {
    const on = (sig: string) => () => resolve(sig);
    process.once("SIGINT", on("SIGINT"));
    process.once("SIGTERM", on("SIGTERM"));
  });
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: { fresh: { type: "boolean", default: false }, ...SHARD_ARG_OPTIONS, ...DISTANCE_ARG_OPTIONS },
  });
  const { stack } = await startDevStack({
    fresh: values.fresh ?? false,
    ...shardArgs(values),
    ...distanceArgs(values),
  });
  printStack(stack);
  say("ready; Ctrl-C to stop");
  const sig = await untilSignal();
  say(`${sig}: stopping`);
  await stack.stop();
  process.exit(0);
}

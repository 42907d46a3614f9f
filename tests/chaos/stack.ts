/**
 * A private stack for chaos tests, separate from the shared test-preload stack so that killing
 * its MariaDB cannot disturb any other test file:
 *
 *   redis-server, MariaDB           real engines (scripts/stack/engines.ts), MariaDB restartable
 *   Upstash-REST, PlanetScale-HTTP  stand-ins in this process (they survive the faults)
 *   local QStash                    its own process (scripts/stack/qstash-cli.ts): kill -9 + restart
 *   the app                         `bun src/entry/bun.ts`, its own process: kill -9 + restart
 *
 * The QStash and app processes restart on the same port (the app's PUBLIC_URL and QStash's
 * destinations stay valid); QStash keeps its state in the Redis, so a restart loses nothing.
 */
import { Client } from "@planetscale/database";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { runMigrations } from "../../scripts/migrate.ts";
import { freePort, startMariadb, startRedis, type MariaEngine } from "../../scripts/stack/engines.ts";
import { createDatabase } from "../../scripts/stack/index.ts";
import { startPlanetscaleHttp } from "../../scripts/stack/planetscale-http.ts";
import { startUpstashRest } from "../../scripts/stack/upstash-rest.ts";
import { ManagedChild, pidAlive, pollUntil, tcpOpen, within } from "../support/child.ts";

const ROOT = join(import.meta.dir, "..", "..");

export interface ChaosStackOptions {
  /** Temp dir: engine data, logs. */
  dir: string;
  /** App configuration on top of the stack's connection settings (e.g. SECKILL_USER_LIMIT). */
  appEnv?: Record<string, string>;
  /** QStash delays and backoffs are multiplied by this. */
  qstashTimeScale?: number;
}

export interface ChaosStack {
  /** The app's environment: connection settings, secrets, PORT, PUBLIC_URL and `appEnv`. */
  env: Record<string, string>;
  appUrl: string;
  app: ManagedChild;
  qstash: ManagedChild;
  /** stdout + stderr of every start of the app / of QStash. */
  appLog: string;
  qstashLog: string;
  /** kill -9 MariaDB, then start it again on the same datadir and port; resolves once it serves queries again. */
  restartMariadb(): Promise<{ downMs: number }>;
  mariadbRestarts: number;
  /** Stops everything this started; never throws. */
  stop(): Promise<void>;
}

const rand = () => crypto.randomUUID().replace(/-/g, "");

export async function startChaosStack(opts: ChaosStackOptions): Promise<ChaosStack> {
  const database = "cityhub_chaos";
  const redisToken = `redis_${rand()}`;
  const qkeys = { token: `chaos_${rand()}`, currentSigningKey: `sig_${rand()}`, nextSigningKey: `sig_${rand()}` };
  const stoppers: (() => Promise<unknown>)[] = [];
  const stopAll = async () => {
    for (const s of stoppers.reverse()) await within(15_000, "stopping a chaos stack part", s()).catch(() => {});
    stoppers.length = 0;
  };
  try {
    const mariaDir = join(opts.dir, "mariadb");
    const [redis, firstMaria] = await Promise.all([
      startRedis({ dir: join(opts.dir, "redis") }),
      startMariadb({ dir: mariaDir }),
    ]);
    let maria: MariaEngine = firstMaria;
    stoppers.push(
      () => redis.stop(),
      () => maria.stop(),
    );
    await createDatabase(maria, database);

    const [rest, planetscale] = await Promise.all([
      startUpstashRest({ redisHost: redis.host, redisPort: redis.port, token: redisToken }),
      startPlanetscaleHttp({
        mysql: { host: maria.host, port: maria.port, user: maria.user, password: maria.password },
        database,
        username: "cityhub",
        password: `db_${rand()}`,
        idleTimeoutMs: 5_000,
      }),
    ]);
    stoppers.push(
      () => rest.stop(),
      () => planetscale.stop(),
    );
    await runMigrations(planetscale.url);

    const bun = process.execPath;
    const baseEnv = {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: process.env.HOME ?? opts.dir,
      UPSTASH_DISABLE_TELEMETRY: "1",
    };

    const qstashPort = await freePort();
    const qstashLog = join(opts.dir, "qstash.log");
    const qstash = new ManagedChild({
      name: "local QStash",
      command: bun,
      args: [
        join(ROOT, "scripts", "stack", "qstash-cli.ts"),
        "--redis",
        `${redis.host}:${redis.port}`,
        "--port",
        String(qstashPort),
        "--time-scale",
        String(opts.qstashTimeScale ?? 0.01),
        "--poll-ms",
        "20",
      ],
      cwd: ROOT,
      env: {
        ...baseEnv,
        QSTASH_TOKEN: qkeys.token,
        QSTASH_CURRENT_SIGNING_KEY: qkeys.currentSigningKey,
        QSTASH_NEXT_SIGNING_KEY: qkeys.nextSigningKey,
      },
      logFile: qstashLog,
      ready: () => tcpOpen(qstashPort),
    });
    stoppers.push(() => qstash.stop());
    await qstash.start();

    const appPort = await freePort();
    const appUrl = `http://127.0.0.1:${appPort}`;
    const env: Record<string, string> = {
      UPSTASH_REDIS_REST_URL: rest.url,
      UPSTASH_REDIS_REST_TOKEN: redisToken,
      DATABASE_URL: planetscale.url,
      QSTASH_URL: `http://127.0.0.1:${qstashPort}`,
      QSTASH_TOKEN: qkeys.token,
      QSTASH_CURRENT_SIGNING_KEY: qkeys.currentSigningKey,
      QSTASH_NEXT_SIGNING_KEY: qkeys.nextSigningKey,
      ADMIN_TOKEN: `adm_${rand()}`,
      PAYMENT_WEBHOOK_SECRET: `pay_${rand()}`,
      SESSION_SECRET: `sess_${rand()}`,
      PUBLIC_URL: appUrl,
      PORT: String(appPort),
      RUN_CRON: "false",
      LOG_LEVEL: "info",
      ...opts.appEnv,
    };
    const appLog = join(opts.dir, "app.log");
    const app = new ManagedChild({
      name: "app",
      command: bun,
      args: [join(ROOT, "src", "entry", "bun.ts")],
      cwd: ROOT,
      env: { ...baseEnv, ...env },
      logFile: appLog,
      ready: async () => {
        const res = await fetch(`${appUrl}/health`, { signal: AbortSignal.timeout(2_000) });
        await res.arrayBuffer();
        return res.status === 200;
      },
    });
    stoppers.push(() => app.stop());
    await app.start();

    const mariaPidFile = join(mariaDir, "mysqld.pid");
    const probeDb = new Client({ url: planetscale.url });
    const stack: ChaosStack = {
      env,
      appUrl,
      app,
      qstash,
      appLog,
      qstashLog,
      mariadbRestarts: 0,
      async restartMariadb() {
        const started = Date.now();
        const pid = Number(readFileSync(mariaPidFile, "utf8").trim());
        if (!Number.isInteger(pid) || pid <= 0) throw new Error(`no MariaDB pid in ${mariaPidFile}`);
        const port = maria.port;
        process.kill(pid, "SIGKILL");
        await pollUntil("MariaDB gone after SIGKILL", async () => !pidAlive(pid) && !(await tcpOpen(port)), 10_000, 20);
        maria = await within(60_000, "MariaDB restart", startMariadb({ dir: mariaDir, port }));
        // Serving again through the same PlanetScale stand-in (its pool drops the dead connections).
        await pollUntil(
          "MariaDB answering through the PlanetScale stand-in",
          async () => {
            await probeDb.execute("SELECT 1");
            return true;
          },
          30_000,
          50,
        );
        stack.mariadbRestarts++;
        return { downMs: Date.now() - started };
      },
      stop: stopAll,
    };
    return stack;
  } catch (err) {
    await stopAll();
    throw err;
  }
}

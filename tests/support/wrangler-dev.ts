/**
 * `npm run worker` as a test runs it: `bun scripts/worker.ts` (exactly what the npm script runs after
 * setup) — its own stack, migrations and demo seed, `wrangler dev` serving src/entry/worker.ts in
 * workerd, the cron on its schedule — in a temp dir on free ports, beside any developer's stack:
 *
 *   bun scripts/worker.ts --dir DIR --free-ports --port P [--var KEY=VALUE …] [--rtt MS]
 *
 * It is ready once it logs `[worker] ready on <url>` (after the Worker answered /health). What it
 * runs with is read back from its files: DIR/stack.env (the stack's settings, admin token and
 * secrets, as `npm run sale -- --stack-env DIR/stack.env` reads them) and DIR/dev.vars (the
 * Worker's vars). stdout + stderr go to DIR/worker.log. It gets SIGTERM when the test process dies,
 * however that ends (PR_SET_PDEATHSIG through setpriv; it also watches its parent), and then stops
 * wrangler, workerd and the stack's engines itself.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { freePort } from "../../scripts/stack/engines.ts";
import { loadStackEnv, parseDotenv } from "../../scripts/stack/env-file.ts";
import { repoRoot } from "../../scripts/stack/workerd.ts";
import { createDeps, type Deps } from "../../src/deps.ts";
import { parseEnv } from "../../src/env.ts";
import { createLogger } from "../../src/log.ts";
import { ManagedChild } from "./child.ts";
import { tail } from "./runtimes.ts";
import { TEST_DEADLINES } from "./stack.ts";

/** How far every dependency of the stack is (the stack's `--rtt`); none by default. */
export interface Distance {
  label: string;
  /** One-way delay added to every dependency, ms (0: none). */
  oneWayMs: number;
}

export const LOCAL: Distance = { label: "local", oneWayMs: 0 };

export interface WranglerDevOptions {
  /** Temp dir of this run: data, settings, vars, secrets and the log. */
  dir: string;
  /** Worker settings on top of the stack's (`--var KEY=VALUE`). */
  vars?: Record<string, string>;
  distance?: Distance;
  /** Default 150 s: a stack, migrations, the demo seed and wrangler's first build on a loaded box. */
  readyTimeoutMs?: number;
}

export interface WranglerDev {
  readonly url: string;
  readonly port: number;
  readonly dir: string;
  readonly logFile: string;
  /** DIR/stack.env: what `npm run sale -- --stack-env` reads. */
  readonly stackEnvFile: string;
  /** The stack's settings (DIR/stack.env): ADMIN_TOKEN, SESSION_SECRET, connection URLs, LOCAL_* engine ports. */
  readonly stackEnv: Record<string, string>;
  /** The Worker's vars (DIR/dev.vars). */
  readonly vars: Record<string, string>;
  /** Pid of `bun scripts/worker.ts`. */
  readonly pid: number | undefined;
  readonly alive: boolean;
  logSize(): number;
  logSince(mark?: number): string;
  logTail(chars?: number): string;
  /** Deps in the test process with the Worker's vars (checker deadlines): for seeding and checks. */
  driver(): Deps;
  /** SIGTERM (SIGKILL after a grace); resolves once scripts/worker.ts has exited; never throws. */
  stop(): Promise<void>;
}

const READY_LINE = "[worker] ready on ";

/** `command args…` that gets SIGTERM when this process dies (so it can stop what it started). */
function termWithParent(command: string, args: string[]): { command: string; args: string[] } {
  const setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].find((p) => existsSync(p));
  return process.platform === "linux" && setpriv
    ? { command: setpriv, args: ["--pdeathsig", "TERM", "--", command, ...args] }
    : { command, args };
}

export async function startWranglerDev(opts: WranglerDevOptions): Promise<WranglerDev> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const logFile = join(opts.dir, "worker.log");
  const stackEnvFile = join(opts.dir, "stack.env");
  const varsFile = join(opts.dir, "dev.vars");
  const distance = opts.distance ?? LOCAL;
  const args = [
    join(repoRoot, "scripts/worker.ts"),
    "--dir",
    opts.dir,
    "--free-ports",
    "--port",
    String(port),
    ...Object.entries(opts.vars ?? {}).flatMap(([k, v]) => ["--var", `${k}=${v}`]),
    // The stack's distance (round trip = 2 × one way): a flag of npm run stack/dev/worker.
    ...(distance.oneWayMs > 0 ? ["--rtt", String(2 * distance.oneWayMs)] : []),
  ];
  const child = new ManagedChild({
    name: "npm run worker (bun scripts/worker.ts)",
    ...termWithParent(process.execPath, args),
    cwd: repoRoot,
    // Only what it needs: the test process's env carries the preload stack's settings.
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: process.env.HOME ?? opts.dir,
      ...(process.env.TMPDIR ? { TMPDIR: process.env.TMPDIR } : {}),
      NO_COLOR: "1",
      UPSTASH_DISABLE_TELEMETRY: "1",
    },
    logFile,
    ready: async () => existsSync(logFile) && readFileSync(logFile, "utf8").includes(`${READY_LINE}${url}`),
    readyTimeoutMs: opts.readyTimeoutMs ?? 150_000,
  });
  try {
    await child.start();
  } catch (err) {
    await child.stop(30_000);
    throw new Error(
      `${err instanceof Error ? err.message : String(err)}\n--- worker log tail ---\n${tail(logFile, 4000)}`,
    );
  }
  const stackEnv = loadStackEnv(stackEnvFile);
  const vars = parseDotenv(readFileSync(varsFile, "utf8"));
  let driver: Deps | undefined;
  return {
    url,
    port,
    dir: opts.dir,
    logFile,
    stackEnvFile,
    stackEnv,
    vars,
    get pid() {
      return child.pid;
    },
    get alive() {
      return child.alive;
    },
    logSize: () => (existsSync(logFile) ? readFileSync(logFile).length : 0),
    logSince: (mark = 0) => (existsSync(logFile) ? readFileSync(logFile).subarray(mark).toString("utf8") : ""),
    logTail: (chars = 3000) => tail(logFile, chars),
    driver() {
      driver ??= createDeps(parseEnv({ ...vars, LOG_LEVEL: "silent", RUN_CRON: "false", ...TEST_DEADLINES }), {
        log: createLogger("silent"),
      });
      return driver;
    },
    async stop() {
      // The worker stops the cron, wrangler (≤ 7 s) and then the stack before it exits.
      await child.stop(30_000);
    },
  };
}

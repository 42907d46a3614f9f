/**
 * The runtime matrix (tests/runtimes/, issue 15 item 4): the SAME app as a real HTTP server on
 * each runtime it ships for, bound to the per-process test stack (tests/support/preload.ts):
 *
 *   bun       `bun src/entry/bun.ts`                       one process
 *   deno      `deno run -A … src/entry/deno.ts`             one process
 *   workerd   the `wrangler deploy --dry-run` bundle, served by workerd through miniflare
 *             (scripts/stack/workerd.ts): a launcher process and its workerd child
 *
 * Each server is started with a deadline and polled for readiness (`GET /health` 200), gets
 * PUBLIC_URL = its own address (the local QStash delivers /internal/* callbacks to it) and can
 * be kill -9'd — the process that runs the app: bun, deno, or workerd itself — and started again
 * on the same port, with the same or changed settings. stdout/stderr of every life go to one log
 * file. Every child dies with the test process, however that ends (PR_SET_PDEATHSIG: bun test
 * runs no exit hooks), and workerd with its launcher.
 *
 * Also here: the app settings every matrix server gets, a private stack, buyers (users +
 * sessions), the Workers bundle (built once per test file) and a small HTTP client.
 */
import { expect } from "bun:test";
import { appendFileSync, closeSync, existsSync, openSync, readFileSync, readSync, statSync, unlinkSync } from "node:fs";
import { join } from "node:path";
import { buyerUsers } from "../../scripts/sale.ts";
import { runMigrations } from "../../scripts/migrate.ts";
import { freePort, killOnExit } from "../../scripts/stack/engines.ts";
import { startStack, type Stack } from "../../scripts/stack/index.ts";
import type { Distance } from "../../scripts/stack/latency-proxy.ts";
import { buildWorker, dieWithParent, repoRoot, scheduledUrl, type WorkerBundle } from "../../scripts/stack/workerd.ts";
import { createDeps, type Deps } from "../../src/deps.ts";
import { parseEnv } from "../../src/env.ts";
import { createLogger } from "../../src/log.ts";
import { createSession, SessionKeys } from "../../src/services/session.ts";
import { ManagedChild, pidAlive, pollUntil, tcpOpen, within } from "./child.ts";
import type { Buyer } from "./sale-checks.ts";
import { TEST_DEADLINES } from "./stack.ts";

export const RUNTIMES = ["bun", "deno", "workerd"] as const;
export type RuntimeName = (typeof RUNTIMES)[number];

/** Runtimes to run, from RUNTIMES="bun,workerd" (default: all three). */
export function selectedRuntimes(): RuntimeName[] {
  const wanted = (process.env.RUNTIMES ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  if (wanted.length === 0) return [...RUNTIMES];
  const unknown = wanted.filter((w) => !(RUNTIMES as readonly string[]).includes(w));
  if (unknown.length > 0)
    throw new Error(`RUNTIMES: unknown runtime(s) ${unknown.join(", ")} (known: ${RUNTIMES.join(", ")})`);
  return wanted as RuntimeName[];
}

/**
 * All requests of a test come from one address (127.0.0.1, or no cf-connecting-ip on workerd), so
 * the per-address limits are off: they would measure the load generator, not the runtime. The cron
 * is off (a test runs its passes itself) and the log at info (the hazard checks read it).
 */
const ONE_ADDRESS_ENV: Record<string, string> = {
  LOG_LEVEL: "info",
  RUN_CRON: "false",
  SECKILL_IP_LIMIT: "0",
  LISTING_IP_LIMIT: "0",
  LOGIN_CODE_SENDS_PER_IP_HOUR: "100000",
};

/**
 * What every matrix server runs with, on top of the stack's connection settings: ONE_ADDRESS_ENV,
 * and the per-dependency deadlines widened as for every test app (tests/support/stack.ts
 * TEST_DEADLINES): the stand-ins share the test process with the load generator on two loaded
 * cores. Everything else — the seckill admission limit, the per-user limit, the breakers — is the
 * production default.
 */
export const MATRIX_APP_ENV: Record<string, string> = { ...ONE_ADDRESS_ENV, ...TEST_DEADLINES };

/** The stack's connection settings for the app (the raw engine addresses are for tools only). */
function connectionEnv(stack: Stack): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(stack.env)) if (!k.startsWith("LOCAL_")) env[k] = v;
  return env;
}

/** The stack's settings for the app, with MATRIX_APP_ENV and `extra` on top. */
export function stackAppEnv(stack: Stack, extra: Record<string, string> = {}): Record<string, string> {
  return { ...connectionEnv(stack), ...MATRIX_APP_ENV, ...extra };
}

/**
 * The stack's settings for the app with only the per-address limits off (ONE_ADDRESS_ENV) and
 * `extra`: deadlines, breakers and load shedding are src/env.ts's defaults, as an operator gets them.
 */
export function productionAppEnv(stack: Stack, extra: Record<string, string> = {}): Record<string, string> {
  return { ...connectionEnv(stack), ...ONE_ADDRESS_ENV, ...extra };
}

/**
 * A stack of its own (same settings as the test preload's), for a file whose cron passes must not
 * sweep, drain or reconcile what other test files left in the shared one (the sweep publishes a
 * drain for every shop with overdue entries, to the PUBLIC_URL of whoever runs it). `distance`: every
 * dependency that far from the app (startStack's latency proxies; `stack.distance.set` moves it at
 * runtime); migrations run near, then the distance is put in force.
 */
export async function startPrivateStack(dir: string, opts: { distance?: Distance } = {}): Promise<Stack> {
  const rand = () => crypto.randomUUID().replace(/-/g, "");
  const stack = await within(
    60_000,
    "a private stack to start",
    startStack({
      dir,
      database: "cityhub_matrix",
      qstashTimeScale: 0.01,
      qstashPollMs: 20,
      adminToken: `matrix-admin-token-${rand()}-${rand()}-${rand()}`,
      qstashKeys: { token: `matrix_${rand()}`, currentSigningKey: `sig_${rand()}`, nextSigningKey: `sig_${rand()}` },
      publicUrl: `http://127.0.0.1:${await freePort()}`,
      distance: opts.distance,
    }),
  );
  try {
    stack.distance?.set({ oneWayMs: 0 });
    await within(60_000, "migrations", runMigrations(stack.env.DATABASE_URL as string));
    if (opts.distance) stack.distance?.set(opts.distance);
  } catch (err) {
    await stack.stop();
    throw err;
  }
  return stack;
}

const bundles = new Map<string, Promise<WorkerBundle>>();

/**
 * The Workers bundle (`wrangler deploy --dry-run --outdir`), built once into `dir`/worker — a test
 * file's temp dir, removed with it (bun test runs no process exit hooks to clean up after).
 */
export function workerBundle(dir: string): Promise<WorkerBundle> {
  let built = bundles.get(dir);
  if (!built) {
    built = within(90_000, "building the Workers bundle", buildWorker(join(dir, "worker")));
    bundles.set(dir, built);
    built.catch(() => bundles.delete(dir));
  }
  return built;
}

export interface RuntimeServer {
  readonly name: RuntimeName;
  readonly url: string;
  readonly port: number;
  /** The app's settings of the current life (connection settings, PUBLIC_URL, overrides). */
  readonly env: Record<string, string>;
  /** Pid of the process that runs the app: bun, deno, or workerd (not its launcher). */
  readonly appPid: number | undefined;
  readonly alive: boolean;
  readonly starts: number;
  readonly kills: number;
  /** stdout + stderr of every life. */
  readonly logFile: string;
  /** Bytes in the log so far (a mark for `logSince`). */
  logSize(): number;
  logSince(mark?: number): string;
  /** kill -9 of the app's process; resolves once it is gone and the port is closed. */
  kill9(): Promise<void>;
  /** Starts again on the same port; `env` replaces settings for this and later lives. */
  restart(env?: Record<string, string>): Promise<void>;
  /** SIGTERM (SIGKILL after a grace); never throws. */
  stop(): Promise<void>;
  /**
   * One scheduled event (the cron) at `timeMs`, through the runtime's own trigger: workerd only
   * (miniflare's /cdn-cgi/handler/scheduled). Resolves to its outcome ("ok" or "exception").
   */
  scheduled(timeMs: number, cron?: string): Promise<string>;
  /** Deps in the test process with this server's settings (and PUBLIC_URL): for checks and cron passes. */
  driver(): Deps;
}

export interface StartRuntimeOptions {
  /** Temp dir for the log and the pid file. */
  dir: string;
  /** The app's settings (stackAppEnv); PORT, PUBLIC_URL and HOST are set here. */
  env: Record<string, string>;
  readyTimeoutMs?: number;
}

const READY_TIMEOUT_MS = 45_000;

async function healthy(url: string): Promise<boolean> {
  const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(3_000) });
  await res.arrayBuffer();
  return res.status === 200;
}

/** Starts `name` serving the app on a free port and waits until `GET /health` is 200. */
export async function startRuntime(name: RuntimeName, opts: StartRuntimeOptions): Promise<RuntimeServer> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const logFile = join(opts.dir, `${name}.log`);
  const pidFile = join(opts.dir, `${name}.workerd.pid`);
  const bundle = name === "workerd" ? await workerBundle(opts.dir) : undefined;
  const baseEnv = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: process.env.HOME ?? opts.dir,
    UPSTASH_DISABLE_TELEMETRY: "1",
    NO_COLOR: "1",
  };
  let env: Record<string, string> = { ...opts.env, PUBLIC_URL: url, PORT: String(port), HOST: "127.0.0.1" };
  let child: ManagedChild | undefined;
  let workerdPid: number | undefined;
  let unregisterWorkerd: (() => void) | undefined;
  let starts = 0;
  let kills = 0;
  let driver: Deps | undefined;

  // Each child dies with this process however it ends (dieWithParent): bun test runs no exit hooks
  // (engines.ts killOnExit never fires under it), and a server left behind would keep its port.
  const makeChild = (): ManagedChild => {
    const common = {
      cwd: repoRoot,
      logFile,
      ready: () => healthy(url),
      readyTimeoutMs: opts.readyTimeoutMs ?? READY_TIMEOUT_MS,
    };
    switch (name) {
      case "bun":
        return new ManagedChild({
          ...common,
          name: "bun app",
          ...dieWithParent(process.execPath, [join(repoRoot, "src/entry/bun.ts")]),
          env: { ...baseEnv, ...env },
        });
      case "deno":
        return new ManagedChild({
          ...common,
          name: "deno app",
          // Offline, as tests/deno/smoke.test.ts runs it: bare specifiers from node_modules, no remote modules, no lockfile.
          ...dieWithParent(join(repoRoot, "node_modules/.bin/deno"), [
            "run",
            "-A",
            "--no-prompt",
            "--node-modules-dir=manual",
            "--no-remote",
            "--cached-only",
            "--no-lock",
            "src/entry/deno.ts",
          ]),
          env: {
            ...baseEnv,
            ...env,
            DENO_NO_UPDATE_CHECK: "1",
            ...(process.env.DENO_DIR ? { DENO_DIR: process.env.DENO_DIR } : {}),
          },
        });
      case "workerd":
        return new ManagedChild({
          ...common,
          name: "workerd launcher",
          ...dieWithParent(process.execPath, [
            join(repoRoot, "scripts/stack/workerd.ts"),
            "--port",
            String(port),
            "--bundle",
            (bundle as WorkerBundle).outdir,
            "--pid-file",
            pidFile,
          ]),
          env: { ...baseEnv, ...env },
        });
    }
  };

  const start = async () => {
    if (name === "workerd" && existsSync(pidFile)) unlinkSync(pidFile);
    appendFileSync(logFile, `--- ${new Date().toISOString()} ${name}: life ${starts + 1} on ${url}\n`);
    child = makeChild();
    try {
      await within((opts.readyTimeoutMs ?? READY_TIMEOUT_MS) + 10_000, `${name} to start`, child.start());
    } catch (err) {
      await child.stop(1_000);
      throw new Error(
        `${err instanceof Error ? err.message : String(err)}\n--- ${name} log tail ---\n${tail(logFile, 4000)}`,
      );
    }
    if (name === "workerd") {
      const pid = Number(readFileSync(pidFile, "utf8").trim());
      if (!Number.isInteger(pid) || pid <= 0) throw new Error(`no workerd pid in ${pidFile}`);
      workerdPid = pid;
      // workerd dies with its launcher (scripts/stack/workerd.ts ties it with setpriv); this exit
      // hook is the fallback where exit hooks run and setpriv does not exist.
      unregisterWorkerd = killOnExit({ kill: (s) => process.kill(pid, s) });
    }
    starts++;
  };

  const server: RuntimeServer = {
    name,
    url,
    port,
    get env() {
      return env;
    },
    get appPid() {
      return name === "workerd" ? workerdPid : child?.pid;
    },
    get alive() {
      return child?.alive === true && (name !== "workerd" || (workerdPid !== undefined && pidAlive(workerdPid)));
    },
    get starts() {
      return starts;
    },
    get kills() {
      return kills;
    },
    logFile,
    logSize: () => (existsSync(logFile) ? statSync(logFile).size : 0),
    logSince: (mark = 0) => readFrom(logFile, mark),
    async kill9() {
      if (name !== "workerd") {
        await child?.kill9();
        kills++;
      } else {
        const pid = workerdPid;
        if (pid === undefined) throw new Error("workerd is not running");
        process.kill(pid, "SIGKILL");
        kills++;
        appendFileSync(logFile, `--- ${new Date().toISOString()} SIGKILL sent to workerd (pid ${pid})\n`);
        // The launcher notices and exits (scripts/stack/workerd.ts); make sure of it either way.
        await pollUntil(
          "the workerd launcher to exit after workerd's kill -9",
          async () => !child?.alive,
          10_000,
          20,
        ).catch(async () => await child?.kill9());
        unregisterWorkerd?.();
        workerdPid = undefined;
      }
      await pollUntil(`${name}'s port to close after kill -9`, async () => !(await tcpOpen(port)), 10_000, 20);
    },
    async restart(newEnv?: Record<string, string>) {
      if (child?.alive) throw new Error(`${name} is still running: kill9() or stop() first`);
      if (newEnv) {
        env = { ...newEnv, PUBLIC_URL: url, PORT: String(port), HOST: "127.0.0.1" };
        driver = undefined;
      }
      await start();
    },
    async stop() {
      await child?.stop(3_000);
      if (workerdPid !== undefined && pidAlive(workerdPid)) {
        try {
          process.kill(workerdPid, "SIGKILL");
        } catch {
          /* gone */
        }
      }
      unregisterWorkerd?.();
      workerdPid = undefined;
    },
    async scheduled(timeMs: number, cron = "* * * * *") {
      if (name !== "workerd")
        throw new Error(`${name} has no scheduled-event trigger (its cron runs in-process: Bun.cron / Deno.cron)`);
      const res = await fetch(scheduledUrl(url, cron, timeMs), { signal: AbortSignal.timeout(60_000) });
      return (await res.text()).trim();
    },
    driver() {
      driver ??= createDeps(parseEnv({ ...env, LOG_LEVEL: "silent", ...TEST_DEADLINES }), {
        log: createLogger("silent"),
      });
      return driver;
    },
  };
  await start();
  return server;
}

function readFrom(file: string, offset: number): string {
  if (!existsSync(file)) return "";
  const size = statSync(file).size;
  if (size <= offset) return "";
  const buf = Buffer.alloc(size - offset);
  const fd = openSync(file, "r");
  try {
    readSync(fd, buf, 0, buf.length, offset);
  } finally {
    closeSync(fd);
  }
  return buf.toString("utf8");
}

/**
 * A test body that, on failure, calls `onFail` (the file keeps its logs) and appends the server's
 * log tail — plus `extra()` when given — to the error: what each matrix file wraps its tests in.
 */
export function guardedBy(
  name: string,
  server: () => RuntimeServer | undefined,
  onFail: () => void,
  extra?: () => string,
) {
  return (fn: () => Promise<void>) => async () => {
    try {
      await fn();
    } catch (err) {
      onFail();
      const s = server();
      if (err instanceof Error && s) {
        if (extra) err.message += `\n--- ${extra()}`;
        err.message += `\n--- ${name} log tail (${s.logFile}) ---\n${tail(s.logFile, 3000)}`;
      }
      throw err;
    }
  };
}

export function tail(file: string, chars: number): string {
  const size = existsSync(file) ? statSync(file).size : 0;
  return readFrom(file, Math.max(0, size - chars));
}

/**
 * `n` buyers: real user rows (phones from a random range of this run, as scripts/sale.ts makes
 * them) and sessions written with the app's own code and the stack's SESSION_SECRET.
 */
export async function seedBuyers(deps: Deps, n: number): Promise<(Buyer & { nickName: string; icon: string })[]> {
  const firstPhone = 15_000_000_000 + Math.floor(Math.random() * 400_000) * 10_000;
  const users = await buyerUsers(deps.db, n, firstPhone);
  if (users.length !== n) throw new Error(`seeded ${users.length} users, wanted ${n}`);
  const keys = new SessionKeys(deps.config.SESSION_SECRET, deps.config.SESSION_SECRET_PREVIOUS);
  const out: (Buyer & { nickName: string; icon: string })[] = [];
  for (let i = 0; i < users.length; i += 500) {
    const chunk = users.slice(i, i + 500);
    const tokens = await Promise.all(chunk.map((u) => createSession(deps.redis, u, 3600, keys)));
    chunk.forEach((u, j) => {
      out.push({ userId: u.id, token: tokens[j] as string, nickName: u.nickName, icon: u.icon });
    });
  }
  return out;
}

/** Runs at most `n` of the given tasks at once. */
export function limiter(n: number): <T>(task: () => Promise<T>) => Promise<T> {
  let active = 0;
  const queue: (() => void)[] = [];
  return async <T>(task: () => Promise<T>): Promise<T> => {
    if (active >= n) await new Promise<void>((r) => queue.push(r));
    active++;
    try {
      return await task();
    } finally {
      active--;
      queue.shift()?.();
    }
  };
}

export interface Answer<T = unknown> {
  status: number;
  body: { success?: boolean; data?: T; code?: string; errorMsg?: string; total?: number } | null;
  /** Network error or timeout (no status). */
  error?: string;
}

/** One request; never throws (a network error or timeout is `status: 0` with `error`). */
export async function request<T = unknown>(
  base: string,
  method: string,
  path: string,
  opts: {
    token?: string;
    json?: unknown;
    timeoutMs?: number;
    signal?: AbortSignal;
    headers?: Record<string, string>;
  } = {},
): Promise<Answer<T>> {
  const timeout = AbortSignal.timeout(opts.timeoutMs ?? 15_000);
  try {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: {
        ...opts.headers,
        ...(opts.token ? { authorization: opts.token } : {}),
        ...(opts.json !== undefined ? { "content-type": "application/json" } : {}),
      },
      body: opts.json === undefined ? undefined : JSON.stringify(opts.json),
      signal: opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout,
    });
    const text = await res.text();
    let body: Answer<T>["body"] = null;
    try {
      body = JSON.parse(text) as Answer<T>["body"];
    } catch {
      /* not JSON */
    }
    return { status: res.status, body };
  } catch (err) {
    return { status: 0, body: null, error: err instanceof Error ? err.message : String(err) };
  }
}

/** Lines of a runtime log that name one of workerd's cross-request / hang / cancel reports. */
export const WORKERD_HAZARDS = ["different request context", "hung", "canceled"] as const;

export function hazardLines(log: string, patterns: readonly string[] = WORKERD_HAZARDS): string[] {
  return log.split("\n").filter((l) => patterns.some((p) => l.toLowerCase().includes(p)));
}

/** No hazard line in `log` (the first three are shown when there are). */
export function expectNoHazardLines(log: string): void {
  const lines = hazardLines(log);
  expect({ count: lines.length, first: lines.slice(0, 3).map((l) => l.slice(0, 300)) }).toEqual({
    count: 0,
    first: [],
  });
}

/** Counts answers by status (0 = no answer), e.g. `{ "200": 2990, "503": 10 }`. */
export function statusCounts(answers: readonly { status: number }[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const a of answers) out[String(a.status)] = (out[String(a.status)] ?? 0) + 1;
  return out;
}

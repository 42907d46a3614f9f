/**
 * `npm run worker` — the Cloudflare Worker (src/entry/worker.ts, bundled by wrangler, run by
 * workerd) against the local stack, in one command:
 *
 *   1. the stack, as `npm run stack` starts it (redis-server, MariaDB, the Upstash-REST,
 *      PlanetScale-HTTP and QStash stand-ins; data under .local/data, settings in .local/stack.env);
 *   2. migrations, and the demo seed on an empty database (as `npm run dev`; `--no-seed` skips it);
 *   3. `.dev.vars` (git-ignored) from the stack's settings, with PUBLIC_URL = the Worker's own URL,
 *      so the local QStash delivers /internal/* callbacks (drains, closes) to the Worker;
 *   4. `wrangler dev --local --ip 127.0.0.1 --port P --show-interactive-dev-session=false
 *      --test-scheduled`, offline (no metrics, no Cloudflare API calls);
 *   5. the cron of wrangler.toml [triggers] on its schedule, as on Workers (wrangler dev fires none):
 *      `GET /__scheduled?cron=…` at each tick, one log line per run (scripts/stack/cron-trigger.ts).
 *
 * Prints the URLs and then `[worker] ready on <url>` once the Worker answers /health. SIGINT /
 * SIGTERM — or the death of the parent process — stop the cron, wrangler (and the workerd it runs)
 * and then the stack. Options:
 *   --port P         the Worker's port (default 8787, or a free port when it is taken)
 *   --fresh          reset the data dir;  --no-seed  migrations only
 *   --dir DIR        everything in DIR instead of .local and the repo root (a test beside a developer's
 *                    stack): data DIR/data, settings DIR/stack.env, secrets DIR/, vars DIR/dev.vars
 *                    (wrangler --env-file; the repo's .dev.vars is neither read nor written), wrangler's
 *                    state DIR/wrangler-state, the demo users' tokens DIR/tokens.txt
 *   --free-ports     every stack port from the kernel instead of the memorable ones (scripts/stack/dev-ports.ts)
 *   --var KEY=VALUE  (repeatable) a setting of src/env.ts for the Worker on top of the stack's
 *   --rtt MS [--jitter MS]  every dependency MS ms round trip away through latency proxies, as for
 *                    `npm run stack` (migrations and the seed run near)
 *
 * wrangler dev is for correctness, not speed (~2k req/s here): benchmarks use the bundle in
 * workerd directly (scripts/bench).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { EnvSchema } from "../src/env.ts";
import { prepareDemoData } from "./demo/prepare.ts";
import { DISTANCE_ARG_OPTIONS, distanceArgs, printStack, startDevStack } from "./stack/cli.ts";
import { startCronTriggers, type CronTrigger } from "./stack/cron-trigger.ts";
import { freePort, killOnExit } from "./stack/engines.ts";
import { ROOT } from "./stack/env-file.ts";
import type { Stack } from "./stack/index.ts";
import { workerdDiesWithUs, wranglerSettings } from "./stack/workerd.ts";

const say = (m: string) => console.error(`[worker] ${m}`);

/** Keeps wrangler offline and quiet (docs/development.md "Toolchain", wrangler offline). */
const WRANGLER_OFFLINE = {
  WRANGLER_SEND_METRICS: "false",
  CLOUDFLARE_CF_FETCH_ENABLED: "false",
  WRANGLER_HIDE_BANNER: "true",
} as const;
export const DEV_VARS_FILE = join(ROOT, ".dev.vars");

/** Settings of src/env.ts from `--var KEY=VALUE` flags; throws on a malformed flag or an unknown name. */
export function parseVarFlags(flags: readonly string[]): Record<string, string> {
  const known = new Set(Object.keys(EnvSchema.shape));
  const out: Record<string, string> = {};
  for (const flag of flags) {
    const eq = flag.indexOf("=");
    const key = eq > 0 ? flag.slice(0, eq) : "";
    if (!key) throw new Error(`--var ${JSON.stringify(flag)}: expected KEY=VALUE`);
    if (!known.has(key)) throw new Error(`--var ${key}: not a setting of src/env.ts`);
    out[key] = flag.slice(eq + 1);
  }
  return out;
}

/**
 * The Worker's vars file (`.dev.vars`, or wrangler's `--env-file`): the stack's settings that src/env.ts
 * knows, PUBLIC_URL pointing at the Worker, then `extra` (the `--var` flags) over them.
 */
export function writeDevVars(
  stackEnv: Record<string, string>,
  publicUrl: string,
  file = DEV_VARS_FILE,
  extra: Record<string, string> = {},
): Record<string, string> {
  const known = new Set(Object.keys(EnvSchema.shape));
  const vars: Record<string, string> = {};
  for (const [k, v] of Object.entries(stackEnv)) if (known.has(k) && k !== "PORT" && k !== "RUN_CRON") vars[k] = v;
  vars.PUBLIC_URL = publicUrl;
  vars.LOG_LEVEL = process.env.LOG_LEVEL ?? "info";
  Object.assign(vars, extra);
  const body = Object.entries(vars)
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
    .join("\n");
  writeFileSync(
    file,
    `# written by \`npm run worker\` from the stack's settings; regenerated on every start (git-ignored)\n${body}\n`,
    { mode: 0o600 },
  );
  return vars;
}

async function waitForHealth(url: string, child: ChildProcess, timeoutMs = 90_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null)
      throw new Error(`wrangler exited with code ${child.exitCode} before the Worker answered`);
    try {
      const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(2_000) });
      await res.arrayBuffer();
      if (res.status < 500) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`the Worker did not answer ${url}/health within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** Stops wrangler and what it started (its own process group: we spawned it detached). */
async function stopWrangler(child: ChildProcess | undefined): Promise<void> {
  if (!child?.pid || child.exitCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  const signalGroup = (sig: NodeJS.Signals) => {
    try {
      process.kill(-(child.pid as number), sig);
    } catch {
      // already gone
    }
  };
  signalGroup("SIGTERM");
  await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
  if (child.exitCode === null) {
    signalGroup("SIGKILL");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 2_000))]);
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      port: { type: "string" },
      fresh: { type: "boolean", default: false },
      "no-seed": { type: "boolean", default: false },
      dir: { type: "string" },
      "free-ports": { type: "boolean", default: false },
      var: { type: "string", multiple: true, default: [] },
      ...DISTANCE_ARG_OPTIONS,
    },
  });
  let extraVars: Record<string, string>;
  let requestedPort: number | undefined;
  try {
    extraVars = parseVarFlags(values.var ?? []);
    if (values.port !== undefined) {
      requestedPort = Number(values.port);
      if (!Number.isInteger(requestedPort) || requestedPort <= 0 || requestedPort > 65535)
        throw new Error(`--port must be a TCP port, got ${JSON.stringify(values.port)}`);
    }
  } catch (err) {
    say(err instanceof Error ? err.message : String(err));
    process.exit(2);
  }
  const localDir = values.dir === undefined ? undefined : resolve(values.dir);
  if (localDir) mkdirSync(localDir, { recursive: true });

  let stack: Stack | undefined;
  let wrangler: ChildProcess | undefined;
  let cron: CronTrigger | undefined;
  let stopping = false;
  // Stops what has started so far. Before the stack is up there is nothing to stop gracefully: exit,
  // and the exit hook of scripts/stack/engines.ts kills the engines already spawned.
  const stopAll = async (code: number) => {
    if (stopping) return;
    stopping = true;
    say("stopping the cron, the Worker and the stack");
    await cron?.stop();
    await stopWrangler(wrangler);
    await stack?.stop();
    process.exit(code);
  };
  process.once("SIGINT", () => void stopAll(0));
  process.once("SIGTERM", () => void stopAll(0));
  // The parent gone (a test runner killed, a closed terminal): this process is re-parented; stop too.
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) {
      say(`parent process ${parent} is gone`);
      void stopAll(1);
    }
  }, 500).unref();

  const started = await startDevStack({
    fresh: values.fresh ?? false,
    localDir,
    freePorts: values["free-ports"],
    appPort: requestedPort,
    ...distanceArgs(values),
  });
  stack = started.stack;
  if (stopping) await new Promise(() => {}); // a signal came while the stack started: stopAll owns the exit
  const port = started.appPort;
  const url = `http://127.0.0.1:${port}`;
  const varsFile = localDir ? join(localDir, "dev.vars") : DEV_VARS_FILE;

  try {
    await prepareDemoData(
      stack,
      {
        seed: !values["no-seed"],
        shops: 500,
        users: 50,
        notSeedingHint: "",
        tokensFile: localDir ? join(localDir, "tokens.txt") : undefined,
      },
      say,
    );
    writeDevVars(stack.env, url, varsFile, extraVars);
    say(
      `wrote ${varsFile} (PUBLIC_URL=${url}${Object.keys(extraVars).length ? `; --var ${Object.keys(extraVars).join(", ")}` : ""})`,
    );
  } catch (err) {
    say(`setup failed: ${err instanceof Error ? err.message : String(err)}`);
    await stopAll(1);
  }

  // workerd is spawned by wrangler's miniflare through a wrapper that kills it when wrangler dies.
  workerdDiesWithUs(localDir);
  const inspector = await freePort();
  wrangler = spawn(
    join(ROOT, "node_modules", ".bin", "wrangler"),
    [
      "dev",
      "--local",
      "--ip",
      "127.0.0.1",
      "--port",
      String(port),
      "--inspector-port",
      String(inspector),
      "--show-interactive-dev-session=false",
      "--test-scheduled",
      ...(localDir ? ["--env-file", varsFile, "--persist-to", join(localDir, "wrangler-state")] : []),
    ],
    {
      cwd: ROOT,
      env: { ...process.env, ...WRANGLER_OFFLINE },
      stdio: ["ignore", "inherit", "inherit"],
      detached: true,
    },
  );
  // Where exit hooks run (process.exit, an uncaught error), wrangler's process group goes too.
  const wranglerPid = wrangler.pid as number;
  killOnExit({ kill: (sig) => process.kill(-wranglerPid, sig) });
  wrangler.on("exit", (code) => {
    if (!stopping) {
      say(`wrangler exited with code ${code}; stopping the stack`);
      void stopAll(code ?? 1);
    }
  });
  try {
    await waitForHealth(url, wrangler);
  } catch (err) {
    say(err instanceof Error ? err.message : String(err));
    await stopAll(1);
  }
  const { crons } = wranglerSettings();
  cron = startCronTriggers({ url, crons, log: say });
  printStack(stack, started.stackEnvFile);
  console.error(
    [
      `  Worker (wrangler dev, workerd)  ${url}/`,
      `    health                      ${url}/health`,
      `    shop types                  ${url}/api/shop-type/list`,
      `    cron trigger                ${url}/__scheduled?cron=…   (fired on schedule: ${crons.join(", ")}, UTC)`,
      `    QStash callbacks            ${url}/internal/*   (PUBLIC_URL in ${varsFile})`,
      `    operator token              ${stack.env.ADMIN_TOKEN}   (authorization: Bearer …)`,
      "",
      "  Ctrl-C stops the Worker and the stack.",
      "",
    ].join("\n"),
  );
  say(`ready on ${url}; Ctrl-C to stop`);
  // Runs until a signal: the handlers above stop the cron, wrangler, then the stack, then exit.
  await new Promise(() => {});
}

/**
 * `bun dev` / `npm run dev` — the whole local platform in one command: the stack (npm run stack),
 * migrations, the demo seed on first run, and the app with hot reload on :8787. Data persists
 * under .local/ across runs; `--fresh` resets it. Options (after `--` with npm):
 *   --seckill-shards N [--shard-commands-per-second C]  N seckill shard databases (scripts/stack/cli.ts)
 *   --rtt MS [--jitter MS]   every dependency MS ms round trip away (latency proxies; setup runs near)
 *   --dir DIR                everything under DIR instead of .local (a test beside a developer's stack)
 *   --free-ports             every port from the kernel;  --port P  the app's port
 * Stopping: Ctrl-C (the whole process group), or SIGINT, SIGTERM or SIGHUP to this process alone,
 * or the death of its parent — each stops the app, then the stack's engines, then exits. Signals
 * that arrive while it stops (a runner forwarding the Ctrl-C again) are ignored, never fatal.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { prepareDemoData } from "./demo/prepare.ts";
import {
  DISTANCE_ARG_OPTIONS,
  distanceArgs,
  printStack,
  SHARD_ARG_OPTIONS,
  shardArgs,
  startDevStack,
} from "./stack/cli.ts";
import { killOnExit } from "./stack/engines.ts";
import { ROOT } from "./stack/env-file.ts";
import type { Stack } from "./stack/index.ts";
import { dieWithParent } from "./stack/workerd.ts";

const say = (m: string) => console.error(`[dev] ${m}`);
const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    fresh: { type: "boolean", default: false },
    "no-seed": { type: "boolean", default: false },
    shops: { type: "string", default: "500" },
    users: { type: "string", default: "50" },
    dir: { type: "string" },
    "free-ports": { type: "boolean", default: false },
    port: { type: "string" },
    ...SHARD_ARG_OPTIONS,
    ...DISTANCE_ARG_OPTIONS,
  },
});
const localDir = values.dir === undefined ? undefined : resolve(values.dir);
const appPort = values.port === undefined ? undefined : Number(values.port);
if (appPort !== undefined && !(Number.isInteger(appPort) && appPort > 0 && appPort < 65536)) {
  say(`--port must be a TCP port, got ${JSON.stringify(values.port)}`);
  process.exit(2);
}

let stack: Stack | undefined;
let app: ChildProcess | undefined;
let stopping = false;
/** Settles once the stack has started (or failed to): a stop requested meanwhile waits for it. */
let stackStarted: Promise<unknown> = Promise.resolve();

async function stopAll(code: number) {
  if (stopping) return;
  stopping = true;
  if (app && app.exitCode === null && app.signalCode === null) {
    const exited = new Promise((r) => app?.once("exit", r));
    app.kill("SIGTERM");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 3000))]);
    if (app.exitCode === null && app.signalCode === null) app.kill("SIGKILL");
  }
  await stackStarted.catch(() => {});
  await stack?.stop();
  process.exit(code);
}

// Installed before anything starts, and kept (process.on, not once): a second signal must not take
// the default action (death without exit hooks), which would leave the engines running.
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const)
  process.on(sig, () => {
    if (stopping) return;
    say(`${sig}: stopping`);
    void stopAll(0);
  });
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent && !stopping) {
    say(`parent process ${parent} is gone: stopping`);
    void stopAll(1);
  }
}, 500).unref();

const starting = startDevStack({
  fresh: values.fresh ?? false,
  localDir,
  freePorts: values["free-ports"],
  appPort,
  ...shardArgs(values),
  ...distanceArgs(values),
});
stackStarted = starting;
let started: Awaited<typeof starting>;
try {
  started = await starting;
} catch (err) {
  say(`the stack did not start: ${err instanceof Error ? err.message : String(err)}`);
  await stopAll(1);
  throw err; // unreachable: stopAll exits
}
stack = started.stack;
if (stopping) await new Promise(() => {}); // a signal came while the stack started: stopAll owns the exit

try {
  await prepareDemoData(
    stack,
    {
      seed: !values["no-seed"],
      shops: Number(values.shops),
      users: Number(values.users),
      notSeedingHint: " (--fresh resets)",
      tokensFile: localDir ? join(localDir, "tokens.txt") : undefined,
    },
    say,
  );
} catch (err) {
  say(`setup failed: ${err instanceof Error ? err.message : String(err)}`);
  await stopAll(1);
}
if (stopping) await new Promise(() => {});

const port = started.appPort;
const url = `http://127.0.0.1:${port}`;
// Tied to this process (setpriv --pdeathsig): a runner killed with -9 must not leave the app on its port.
const appCmd = dieWithParent(join(ROOT, "node_modules", ".bin", "bun"), [
  "--hot",
  join(ROOT, "src", "entry", "bun.ts"),
]);
app = spawn(appCmd.command, appCmd.args, {
  cwd: ROOT,
  env: { ...process.env, ...stack.env, PORT: String(port), LOG_LEVEL: process.env.LOG_LEVEL ?? "info" },
  stdio: "inherit",
});
// Where exit hooks run (process.exit, an uncaught error), the app goes too.
app.on("exit", killOnExit(app));
app.on("exit", (code) => {
  if (!stopping) {
    say(`app exited with code ${code}; stopping the stack`);
    void stopAll(code ?? 1);
  }
});

printStack(stack, started.stackEnvFile);
console.error(
  [
    `  App (hot reload)      ${url}/`,
    `    operator console    ${url}/console   (sign in with the operator token)`,
    `    API docs            ${url}/docs   (OpenAPI: ${url}/openapi.json)`,
    `    health              ${url}/health`,
    `    shop types          ${url}/api/shop-type/list`,
    `    operator token      ${stack.env.ADMIN_TOKEN}   (authorization: Bearer …)`,
    "",
    "  Ctrl-C stops everything.",
    "",
  ].join("\n"),
);
say(`ready on ${url}`);
// Runs until a signal: the handlers above stop the app, then the stack, then exit.
await new Promise(() => {});

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
 *      --test-scheduled`, offline (no metrics, no Cloudflare API calls): the cron trigger is
 *      `GET /__scheduled?cron=*+*+*+*+*`.
 *
 * Prints the URLs once the Worker answers /health. Ctrl-C / SIGTERM stops wrangler (and the
 * workerd it runs) and then the stack. Options: --port P (default 8787, or a free port when it
 * is taken), --fresh (reset .local/data), --no-seed, --rtt MS [--jitter MS] (every dependency MS ms
 * round trip away through latency proxies, as for `npm run stack`; migrations and the seed run near).
 *
 * wrangler dev is for correctness, not speed (~2k req/s here): benchmarks use the bundle in
 * workerd directly (scripts/bench).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { EnvSchema } from "../src/env.ts";
import { prepareDemoData } from "./demo/prepare.ts";
import { DISTANCE_ARG_OPTIONS, distanceArgs, printStack, startDevStack } from "./stack/cli.ts";
import { freePort } from "./stack/engines.ts";
import { ROOT } from "./stack/env-file.ts";

const say = (m: string) => console.error(`[worker] ${m}`);
const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    port: { type: "string" },
    fresh: { type: "boolean", default: false },
    "no-seed": { type: "boolean", default: false },
    ...DISTANCE_ARG_OPTIONS,
  },
});

/** Keeps wrangler offline and quiet (docs/toolchain.md, "wrangler offline"). */
const WRANGLER_OFFLINE = {
  WRANGLER_SEND_METRICS: "false",
  CLOUDFLARE_CF_FETCH_ENABLED: "false",
  WRANGLER_HIDE_BANNER: "true",
} as const;
export const DEV_VARS_FILE = join(ROOT, ".dev.vars");

/** `.dev.vars`: the stack's settings that src/env.ts knows, PUBLIC_URL pointing at the Worker. */
export function writeDevVars(
  stackEnv: Record<string, string>,
  publicUrl: string,
  file = DEV_VARS_FILE,
): Record<string, string> {
  const known = new Set(Object.keys(EnvSchema.shape));
  const vars: Record<string, string> = {};
  for (const [k, v] of Object.entries(stackEnv)) if (known.has(k) && k !== "PORT" && k !== "RUN_CRON") vars[k] = v;
  vars.PUBLIC_URL = publicUrl;
  vars.LOG_LEVEL = process.env.LOG_LEVEL ?? "info";
  const body = Object.entries(vars)
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
    .join("\n");
  writeFileSync(
    file,
    `# written by \`npm run worker\` from .local/stack.env; regenerated on every start (git-ignored)\n${body}\n`,
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
  const { stack, appPort } = await startDevStack({ fresh: values.fresh ?? false, ...distanceArgs(values) });
  const port = values.port ? Number(values.port) : appPort;
  const url = `http://127.0.0.1:${port}`;
  let wrangler: ChildProcess | undefined;
  let stopping = false;
  const stopAll = async (code: number) => {
    if (stopping) return;
    stopping = true;
    say("stopping the Worker and the stack");
    await stopWrangler(wrangler);
    await stack.stop();
    process.exit(code);
  };
  process.once("SIGINT", () => void stopAll(0));
  process.once("SIGTERM", () => void stopAll(0));

  try {
    await prepareDemoData(stack, { seed: !values["no-seed"], shops: 500, users: 50, notSeedingHint: "" }, say);
    writeDevVars(stack.env, url);
    say(`wrote ${DEV_VARS_FILE} (PUBLIC_URL=${url})`);
  } catch (err) {
    say(`setup failed: ${err instanceof Error ? err.message : String(err)}`);
    await stopAll(1);
  }

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
    ],
    {
      cwd: ROOT,
      env: { ...process.env, ...WRANGLER_OFFLINE },
      stdio: ["ignore", "inherit", "inherit"],
      detached: true,
    },
  );
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
  printStack(stack);
  console.error(
    [
      `  Worker (wrangler dev, workerd)  ${url}/`,
      `    health                      ${url}/health`,
      `    shop types                  ${url}/api/shop-type/list`,
      `    cron trigger                ${url}/__scheduled?cron=*+*+*+*+*`,
      `    QStash callbacks            ${url}/internal/*   (PUBLIC_URL in .dev.vars)`,
      `    operator token              ${stack.env.ADMIN_TOKEN}   (authorization: Bearer …)`,
      "",
      "  Ctrl-C stops the Worker and the stack.",
      "",
    ].join("\n"),
  );
  say("ready; Ctrl-C to stop");
  // Runs until a signal: the handlers above stop wrangler, then the stack, then exit.
  await new Promise(() => {});
}

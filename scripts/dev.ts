/**
 * `npm run dev` / `bun dev` — the whole local platform in one command: the stack (npm run stack),
 * migrations, the demo seed on first run, and the app with hot reload on :8787. Data persists
 * under .local/ across runs; `--fresh` resets it. Ctrl-C stops everything this started.
 * `-- --seckill-shards N [--shard-commands-per-second C]` adds N seckill shard databases (see
 * scripts/stack/cli.ts); the app gets them through SECKILL_SHARD_URLS / SECKILL_SHARD_TOKENS.
 * `-- --rtt MS [--jitter MS]` puts every dependency MS ms round trip away (latency proxies, as for
 * `npm run stack`); migrations and the seed run near, the app far.
 */
import { spawn } from "node:child_process";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { prepareDemoData } from "./demo/prepare.ts";
import {
  DISTANCE_ARG_OPTIONS,
  distanceArgs,
  printStack,
  SHARD_ARG_OPTIONS,
  shardArgs,
  startDevStack,
  untilSignal,
} from "./stack/cli.ts";
import { ROOT } from "./stack/env-file.ts";

const say = (m: string) => console.error(`[dev] ${m}`);
const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    fresh: { type: "boolean", default: false },
    "no-seed": { type: "boolean", default: false },
    shops: { type: "string", default: "500" },
    users: { type: "string", default: "50" },
    ...SHARD_ARG_OPTIONS,
    ...DISTANCE_ARG_OPTIONS,
  },
});

const { stack, appPort } = await startDevStack({
  fresh: values.fresh ?? false,
  ...shardArgs(values),
  ...distanceArgs(values),
});
let app: ReturnType<typeof spawn> | undefined;
let stopping = false;

async function stopAll(code: number) {
  if (stopping) return;
  stopping = true;
  if (app && app.exitCode === null) {
    const exited = new Promise((r) => app?.once("exit", r));
    app.kill("SIGTERM");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 3000))]);
    if (app.exitCode === null) app.kill("SIGKILL");
  }
  await stack.stop();
  process.exit(code);
}

try {
  await prepareDemoData(
    stack,
    {
      seed: !values["no-seed"],
      shops: Number(values.shops),
      users: Number(values.users),
      notSeedingHint: " (--fresh resets)",
    },
    say,
  );
} catch (err) {
  say(`setup failed: ${err instanceof Error ? err.message : String(err)}`);
  await stopAll(1);
}

app = spawn(join(ROOT, "node_modules", ".bin", "bun"), ["--hot", join(ROOT, "src", "entry", "bun.ts")], {
  cwd: ROOT,
  env: { ...process.env, ...stack.env, PORT: String(appPort), LOG_LEVEL: process.env.LOG_LEVEL ?? "info" },
  stdio: "inherit",
});
app.on("exit", (code) => {
  if (!stopping) {
    say(`app exited with code ${code}; stopping the stack`);
    void stopAll(code ?? 1);
  }
});

printStack(stack);
console.error(
  [
    `  App (hot reload)      http://127.0.0.1:${appPort}/`,
    `    health              http://127.0.0.1:${appPort}/health`,
    `    shop types          http://127.0.0.1:${appPort}/api/shop-type/list`,
    `    operator token      ${stack.env.ADMIN_TOKEN}   (authorization: Bearer …)`,
    "",
    "  Ctrl-C stops everything.",
    "",
  ].join("\n"),
);
const sig = await untilSignal();
say(`${sig}: stopping`);
await stopAll(0);

/**
 * `npm run stack` — redis-server, MariaDB and the three stand-ins in the foreground, data under
 * .local/data, settings in .local/stack.env. Ctrl-C / SIGTERM stops everything it started.
 */
import { parseArgs } from "node:util";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { startStack, type Stack } from "./index.ts";
import { pickPorts } from "./dev-ports.ts";
import { LOCAL_DIR, STACK_ENV_FILE, writeStackEnv } from "./env-file.ts";
import { localAdminToken, localPaymentWebhookSecret, localSessionSecret } from "./secrets.ts";

export const DATA_DIR = join(LOCAL_DIR, "data");
const say = (m: string) => console.error(`[stack] ${m}`);

/** Starts the persistent developer stack and writes .local/stack.env. */
export async function startDevStack(opts: { fresh: boolean }): Promise<{ stack: Stack; appPort: number }> {
  if (opts.fresh) {
    say("--fresh: removing .local/data");
    rmSync(DATA_DIR, { recursive: true, force: true });
  }
  const ports = await pickPorts(say);
  const stack = await startStack({
    dir: DATA_DIR,
    persist: true,
    ports,
    adminToken: localAdminToken(),
    paymentWebhookSecret: localPaymentWebhookSecret(),
    sessionSecret: localSessionSecret(),
    publicUrl: `http://127.0.0.1:${ports.app}`,
    log: say,
  });
  writeStackEnv({ ...stack.env, PORT: String(ports.app) });
  return { stack, appPort: ports.app };
}

export function printStack(stack: Stack): void {
  const e = stack.env;
  console.error(
    [
      "",
      "  Local stack (real engines behind protocol-compatible stand-ins):",
      `    Upstash Redis REST  ${e.UPSTASH_REDIS_REST_URL}   → redis-server ${e.LOCAL_REDIS_URL}`,
      `    PlanetScale HTTP    ${stack.planetscale.url.replace(/\/\/[^@]*@/, "//")}   → MariaDB ${e.LOCAL_MYSQL_URL}`,
      `    QStash              ${e.QSTASH_URL}`,
      `    settings            ${STACK_ENV_FILE}`,
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
  const { values } = parseArgs({ args: process.argv.slice(2), options: { fresh: { type: "boolean", default: false } } });
  const { stack } = await startDevStack({ fresh: values.fresh ?? false });
  printStack(stack);
  say("ready; Ctrl-C to stop");
  const sig = await untilSignal();
  say(`${sig}: stopping`);
  await stack.stop();
  process.exit(0);
}

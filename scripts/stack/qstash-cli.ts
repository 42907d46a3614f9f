/**
 * The local QStash stand-in as a process of its own (`bun scripts/stack/qstash-cli.ts`), for
 * setups that need to kill and restart it independently of the rest of the stack (chaos tests).
 * Its state lives in the Redis it is pointed at, so a new process on the same Redis continues
 * where a killed one left off (leases of attempts in flight expire and are re-delivered).
 *
 *   QSTASH_TOKEN=… QSTASH_CURRENT_SIGNING_KEY=… QSTASH_NEXT_SIGNING_KEY=… \
 *     bun scripts/stack/qstash-cli.ts --redis 127.0.0.1:6379 --port 8080 [--time-scale 0.01] [--poll-ms 20]
 *
 * Credentials come from the environment (the variable names of src/env.ts), never from argv, so
 * they do not show in process listings; without them it uses the SDK's dev-mode values. Prints
 * `[local-qstash] listening on <url>` to stderr once it accepts requests; SIGTERM/SIGINT stop it
 * cleanly (its leases are released at once).
 */
import { parseArgs } from "node:util";
import { QSTASH_DEV } from "./index.ts";
import { startLocalQstash } from "./qstash/index.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    redis: { type: "string", default: "127.0.0.1:6379" },
    port: { type: "string", default: "8080" },
    hostname: { type: "string", default: "127.0.0.1" },
    "time-scale": { type: "string", default: "1" },
    "poll-ms": { type: "string", default: "100" },
    "key-prefix": { type: "string" },
  },
});

const [redisHost, redisPortText] = (values.redis ?? "").replace(/^redis:\/\//, "").split(":");
const redisPort = Number(redisPortText);
const port = Number(values.port);
if (!redisHost || !Number.isInteger(redisPort) || !Number.isInteger(port)) {
  console.error("usage: qstash-cli.ts --redis HOST:PORT --port PORT [--time-scale N] [--poll-ms N]");
  process.exit(2);
}

const server = await startLocalQstash({
  redisHost,
  redisPort,
  token: process.env.QSTASH_TOKEN ?? QSTASH_DEV.token,
  currentSigningKey: process.env.QSTASH_CURRENT_SIGNING_KEY ?? QSTASH_DEV.currentSigningKey,
  nextSigningKey: process.env.QSTASH_NEXT_SIGNING_KEY ?? QSTASH_DEV.nextSigningKey,
  port,
  hostname: values.hostname,
  timeScale: Number(values["time-scale"]),
  pollIntervalMs: Number(values["poll-ms"]),
  keyPrefix: values["key-prefix"],
});
console.error(`[local-qstash] listening on ${server.url}`);

let stopping = false;
const stop = async (signal: string) => {
  if (stopping) return;
  stopping = true;
  console.error(`[local-qstash] ${signal}: stopping`);
  await server.stop();
  process.exit(0);
};
process.on("SIGTERM", () => void stop("SIGTERM"));
process.on("SIGINT", () => void stop("SIGINT"));

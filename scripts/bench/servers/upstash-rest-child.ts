/**
 * Runs the Upstash-REST stand-in (scripts/stack/upstash-rest.ts) in its own bun process for the
 * bench, the way the real Upstash REST endpoint is a separate server: in the runner's process it
 * would share one JS thread with the @upstash/redis client driving it, and the measurement would
 * mostly show the two competing for that thread.
 *
 * Env: PORT, HOST (127.0.0.1), REDIS_HOST, REDIS_PORT, TOKEN.
 * IPC (Bun.spawn `ipc`): the parent sends {type:"stats"} | {type:"reset"}; the child answers
 * {type:"stats", stats} | {type:"reset-done"}. It sends {type:"ready", url} once listening.
 */
import { startUpstashRest } from "../../stack/upstash-rest.ts";

const env = (k: string): string => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is required`);
  return v;
};

const server = await startUpstashRest({
  redisHost: env("REDIS_HOST"),
  redisPort: Number(env("REDIS_PORT")),
  token: env("TOKEN"),
  port: Number(env("PORT")),
  hostname: "127.0.0.1",
});

process.on("message", (m: unknown) => {
  const type = (m as { type?: unknown } | null)?.type;
  if (type === "stats") process.send?.({ type: "stats", stats: server.stats() });
  else if (type === "reset") {
    server.resetStats();
    process.send?.({ type: "reset-done" });
  }
});
process.on("SIGTERM", () => {
  void server.stop().finally(() => process.exit(0));
});
process.send?.({ type: "ready", url: server.url });
console.log(`upstash-rest stand-in listening on ${server.url}`);

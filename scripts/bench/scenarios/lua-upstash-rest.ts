/**
 * Group "lua": the same EVALSHA the way production calls it — the @upstash/redis SDK over HTTP —
 * against the Upstash-REST stand-in (own bun process) in front of the same redis-server. Many
 * concurrent callers share one client with auto-pipelining on (the SDK default), so concurrent
 * commands are batched into /pipeline requests; the "REST trips/cmd" column shows how well.
 */
import { Redis } from "@upstash/redis";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { closedLoop } from "../lib/closed-loop.ts";
import { spawnBunServer } from "../lib/proc.ts";
import { withTimeout } from "../lib/util.ts";
import { luaRedis } from "../fixtures/lua-redis.ts";
import { defineScenario } from "../types.ts";

interface Stats {
  requests: number;
  commands: number;
}

const STANDIN = join(import.meta.dir, "../../stack/upstash-rest.ts");
const TOKEN = "bench-token";

export default defineScenario({
  name: "lua-upstash-rest",
  group: "lua",
  description:
    "redis.evalsha() with @upstash/redis (auto-pipelining, production options) → Upstash-REST stand-in (own bun process) → redis-server",
  async setup(ctx) {
    if (!existsSync(STANDIN)) throw new Error(`${STANDIN} does not exist yet`);
    const r = await luaRedis(ctx);

    // Replies to IPC requests are matched FIFO: the runner asks one thing at a time.
    const waiting: Array<(m: { type: string; stats?: Stats }) => void> = [];
    const server = await spawnBunServer({
      script: join(import.meta.dir, "../servers/upstash-rest-child.ts"),
      env: { REDIS_HOST: r.host, REDIS_PORT: String(r.port), TOKEN },
      ipc: (m) => {
        const msg = m as { type: string; stats?: Stats };
        if (msg.type === "stats" || msg.type === "reset-done") waiting.shift()?.(msg);
      },
    });
    const ask = (type: "stats" | "reset") =>
      withTimeout(
        new Promise<{ type: string; stats?: Stats }>((resolve) => {
          waiting.push(resolve);
          server.proc.send({ type });
        }),
        5000,
        `stand-in ${type} over IPC`,
      );

    // Same options as src/deps.ts: no retries (fail fast), no telemetry, auto-pipelining default.
    const redis = new Redis({ url: server.url, token: TOKEN, retry: false, enableTelemetry: false });
    const first = await redis.evalsha<[], number>(r.sha, [r.key], []);
    if (!(typeof first === "number" && first > 0))
      throw new Error(`evalsha through the stand-in returned ${String(first)}`);

    return {
      kind: "run",
      async run(opts) {
        await ask("reset");
        const m = await closedLoop({
          durationMs: opts.durationMs,
          concurrency: opts.concurrency,
          op: () => redis.evalsha(r.sha, [r.key], []),
        });
        const s = (await ask("stats")).stats;
        if (s && s.commands > 0) m.extras = { "REST trips/cmd": s.requests / s.commands };
        return m;
      },
      teardown: server.stop,
    };
  },
});

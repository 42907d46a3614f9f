/**
 * Baseline of group "lua": one EVALSHA over Redis' own protocol (RESP) with Bun's native
 * RedisClient — one TCP connection, auto-pipelined, many concurrent callers. The floor for any
 * Lua call made from the app.
 */
import { RedisClient } from "bun";
import { closedLoop } from "../lib/closed-loop.ts";
import { luaRedis } from "../fixtures/lua-redis.ts";
import { defineScenario } from "../types.ts";

export default defineScenario({
  name: "lua-bun-redisclient",
  group: "lua",
  baseline: true,
  description:
    "EVALSHA (bounded DECR) via Bun's RedisClient over RESP, one pipelined connection, in-process closed loop",
  async setup(ctx) {
    const r = await luaRedis(ctx);
    const client = new RedisClient(`redis://${r.host}:${r.port}`, { autoReconnect: false });
    await client.connect();
    const args = [r.sha, "1", r.key];
    return {
      kind: "run",
      run: (opts) =>
        closedLoop({
          durationMs: opts.durationMs,
          concurrency: opts.concurrency,
          op: () => client.send("EVALSHA", args),
        }),
      teardown: async () => client.close(),
    };
  },
});

/**
 * Group "lua": the same EVALSHA with the hand-written RESP2 client (scripts/stack/resp.ts) that
 * the Upstash-REST stand-in uses internally. Separates the stand-in's Redis-side cost from the
 * cost of the REST hop itself.
 */
import { closedLoop } from "../lib/closed-loop.ts";
import { luaRedis } from "../fixtures/lua-redis.ts";
import { RespClient, RespError } from "../../stack/resp.ts";
import { defineScenario } from "../types.ts";

export default defineScenario({
  name: "lua-stack-resp",
  group: "lua",
  description: "EVALSHA via scripts/stack/resp.ts (JS RESP2 client, one pipelined connection), in-process closed loop",
  async setup(ctx) {
    const r = await luaRedis(ctx);
    const client = new RespClient({ host: r.host, port: r.port });
    const cmd = ["EVALSHA", r.sha, "1", r.key] as const;
    const first = await client.command(cmd);
    if (first instanceof RespError) throw new Error(`EVALSHA failed: ${first.message}`);
    return {
      kind: "run",
      run: (opts) =>
        closedLoop({
          durationMs: opts.durationMs,
          concurrency: opts.concurrency,
          // Error replies are values in this client; count them as failed ops.
          op: async () => {
            const v = await client.command(cmd);
            if (v instanceof RespError) throw new Error(v.message);
          },
        }),
      teardown: () => client.close(),
    };
  },
});

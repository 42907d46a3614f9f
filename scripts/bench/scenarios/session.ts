/**
 * Group "session": a warm authenticated request, GET /api/user/me, on the real app next to a Hono
 * hello-world loaded with the same wrk script (wrk/rotate-tokens.lua: WARM_TOKENS distinct
 * sessions round robin, each request with its own `authorization` header), so wrk's per-request
 * work is identical and the ratio is what authentication plus the app's middleware cost.
 *
 * The sessions are the seckill stack's (fixtures/seckill-stack.ts: opened through createSession,
 * src/services/session.ts, with the stack's signing keys), the first WARM_TOKENS of them —
 * fewer than SESSION_CACHE_MAX, so after the warm-up every request is answered from the isolate's
 * session cache. The app is servers/app-seckill.ts (the real app), which counts every Redis
 * command its own client sends, background upkeep included (session sync, UV, cache metrics, the
 * id lease): "Redis cmds/req" = those commands in the round ÷ requests the app served.
 */
import { join } from "node:path";
import {
  seckillStack,
  startAppServer,
  redisSummary,
  redisTotal,
  unhandledErrors,
  warmTokensFile,
  USER_BASE,
  type PipelineStats,
} from "../fixtures/seckill-stack.ts";
import { spawnBunServer } from "../lib/proc.ts";
import { formatInt } from "../lib/util.ts";
import { defineScenario, type Extras } from "../types.ts";

const GROUP = "session";
const WARM_TOKENS = 2_000;
const TOKENS_LUA = join(import.meta.dir, "../wrk/rotate-tokens.lua");

const hello = defineScenario({
  name: "session-hello",
  group: GROUP,
  baseline: true,
  description: `GET / on a Hono hello-world (servers/hono-hello.ts, own bun process), same wrk script and ${WARM_TOKENS.toLocaleString("en-US")} tokens as user-me`,
  async setup(ctx) {
    const stack = await seckillStack(ctx);
    const tokensFile = await warmTokensFile(stack, WARM_TOKENS);
    const server = await spawnBunServer({ script: join(import.meta.dir, "../servers/hono-hello.ts") });
    return {
      kind: "http",
      url: `${server.url}/`,
      luaScript: TOKENS_LUA,
      luaArgs: [tokensFile, "GET"],
      teardown: server.stop,
    };
  },
});

const me = defineScenario({
  name: "user-me",
  group: GROUP,
  description:
    `GET /api/user/me on the app (servers/app-seckill.ts, own bun process), ${WARM_TOKENS.toLocaleString("en-US")} distinct warm sessions round robin (signed tokens from createSession); ` +
    '"Redis cmds/req" = every command the app\'s own Redis client sent in the round (session sync, UV, metrics, id lease) ÷ requests served (target ≤ 0.05)',
  async setup(ctx) {
    const stack = await seckillStack(ctx);
    const tokensFile = await warmTokensFile(stack, WARM_TOKENS);
    const app = await startAppServer(stack);
    const url = `${app.url}/api/user/me`;
    try {
      // Three sessions answer with their own user; a garbage token is refused.
      const tokens = (await Bun.file(tokensFile).text()).split("\n").filter(Boolean);
      for (const [i, token] of [
        [0, tokens[0]!],
        [1, tokens[1]!],
        [WARM_TOKENS - 1, tokens[WARM_TOKENS - 1]!],
      ] as const) {
        const res = await fetch(url, { headers: { authorization: token }, signal: AbortSignal.timeout(5000) });
        const body = (await res.json()) as { success?: boolean; data?: { id?: number } };
        if (res.status !== 200 || body.success !== true || body.data?.id !== USER_BASE + i + 1) {
          throw new Error(
            `GET /api/user/me with session ${i} answered ${res.status} ${JSON.stringify(body).slice(0, 200)}`,
          );
        }
      }
      const bad = await fetch(url, { headers: { authorization: "garbage" }, signal: AbortSignal.timeout(5000) });
      await bad.arrayBuffer();
      if (bad.status !== 401)
        throw new Error(`GET /api/user/me with a garbage token answered ${bad.status}, expected 401`);
    } catch (e) {
      await app.stop();
      throw e;
    }
    let round = 0;
    return {
      kind: "http",
      url,
      luaScript: TOKENS_LUA,
      luaArgs: [tokensFile, "GET"],
      async beforeRound() {
        await app.ask<PipelineStats>({ type: "pipeline-stats", reset: true });
      },
      async afterRound(): Promise<Extras> {
        const p = await app.ask<PipelineStats>({ type: "pipeline-stats" });
        const cmds = redisTotal(p.redis);
        ctx.log(
          `  user-me round ${++round}: ${formatInt(p.served)} requests served, app-client Redis ${cmds} cmds: ${redisSummary(p.redis)}`,
        );
        return {
          "Redis cmds/req": p.served > 0 ? cmds / p.served : Number.NaN,
          "unhandled errors": unhandledErrors(p),
        };
      },
      teardown: app.stop,
    };
  },
});

export default [hello, me];

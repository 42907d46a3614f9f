/**
 * Group "idempotency": what an `Idempotency-Key` costs (src/http/idempotency.ts), on the real app
 * (servers/app-seckill.ts, own bun process) with WARM_TOKENS distinct warm sessions round robin.
 * The route is POST /api/user/sign (daily check-in: one SETBIT, no MySQL), so the key's own work
 * is a large share of what is measured:
 *
 *   idem-none    no header: the baseline (the middleware reads one header and calls next)
 *   idem-replay  the same key per session, same request: after the warm-up every request is a
 *                replay — one claim EVALSHA that returns the stored response; the route never runs
 *   idem-fresh   a new key every request: claim, the route, the finish EVALSHA that stores it
 *
 * "Redis cmds/req" = every command the app's own client sent in the round (background upkeep
 * included) ÷ requests served; "idem cmds/req" = the claim and finish EVALSHAs alone (expected:
 * 0, 1 and 2). wrk scripts: wrk/rotate-tokens.lua (none), wrk/rotate-tokens-idem.lua (the others).
 */
import { join } from "node:path";
import {
  seckillStack,
  startAppServer,
  redisSummary,
  redisTotal,
  unhandledErrors,
  warmTokensFile,
  type AppServer,
  type PipelineStats,
} from "../fixtures/seckill-stack.ts";
import { formatInt } from "../lib/util.ts";
import { defineScenario, type BenchContext, type Extras, type HttpTarget } from "../types.ts";

const GROUP = "idempotency";
const WARM_TOKENS = 2_000;
const PATH = "/api/user/sign";
const TOKENS_LUA = join(import.meta.dir, "../wrk/rotate-tokens.lua");
const IDEM_LUA = join(import.meta.dir, "../wrk/rotate-tokens-idem.lua");
const IDEM_KINDS = ["evalsha idempotencyClaim", "evalsha idempotencyFinish", "eval"] as const;

/** Checks the route answers as the row assumes before it is loaded: the header's three outcomes. */
async function check(app: AppServer, token: string): Promise<void> {
  const url = `${app.url}${PATH}`;
  const key = `bench-check-${crypto.randomUUID()}`;
  const send = async (headers: Record<string, string>) => {
    const res = await fetch(url, {
      method: "POST",
      headers: { authorization: token, ...headers },
      signal: AbortSignal.timeout(5000),
    });
    const body = (await res.json()) as { success?: boolean };
    return { status: res.status, replayed: res.headers.get("idempotent-replayed"), success: body.success };
  };
  const plain = await send({});
  const first = await send({ "idempotency-key": key });
  const replay = await send({ "idempotency-key": key });
  const bad = await send({ "idempotency-key": "has space" });
  const ok =
    plain.status === 200 &&
    plain.success &&
    first.status === 200 &&
    first.replayed === null &&
    replay.status === 200 &&
    replay.replayed === "true" &&
    bad.status === 400;
  if (!ok)
    throw new Error(
      `${PATH}: expected 200 / 200 / 200 replayed / 400, got ${JSON.stringify({ plain, first, replay, bad })}`,
    );
}

/** One row: the app server, a wrk script and args, and the per-round command counts. */
function row(
  name: string,
  baseline: boolean,
  description: string,
  lua: (tokensFile: string) => { luaScript: string; luaArgs: string[] },
) {
  return defineScenario({
    name,
    group: GROUP,
    baseline,
    description,
    async setup(ctx: BenchContext): Promise<HttpTarget> {
      const stack = await seckillStack(ctx);
      const tokensFile = await warmTokensFile(stack, WARM_TOKENS);
      const app = await startAppServer(stack);
      try {
        const first = (await Bun.file(tokensFile).text()).split("\n").find(Boolean);
        await check(app, first as string);
      } catch (e) {
        await app.stop();
        throw e;
      }
      let round = 0;
      return {
        kind: "http",
        url: `${app.url}${PATH}`,
        method: "POST",
        ...lua(tokensFile),
        async beforeRound() {
          await app.ask<PipelineStats>({ type: "pipeline-stats", reset: true });
        },
        async afterRound(): Promise<Extras> {
          const p = await app.ask<PipelineStats>({ type: "pipeline-stats" });
          const cmds = redisTotal(p.redis);
          const idem = IDEM_KINDS.reduce((n, k) => n + (p.redis[k] ?? 0), 0);
          ctx.log(
            `  ${name} round ${++round}: ${formatInt(p.served)} requests served, app-client Redis ${cmds} cmds: ${redisSummary(p.redis)}`,
          );
          const per = (n: number) => (p.served > 0 ? n / p.served : Number.NaN);
          return { "Redis cmds/req": per(cmds), "idem cmds/req": per(idem), "unhandled errors": unhandledErrors(p) };
        },
        teardown: app.stop,
      };
    },
  });
}

const runId = crypto.randomUUID().slice(0, 8);

export default [
  row(
    "idem-none",
    true,
    `POST ${PATH} without Idempotency-Key, ${WARM_TOKENS.toLocaleString("en-US")} warm sessions round robin (wrk/rotate-tokens.lua)`,
    (tokensFile) => ({ luaScript: TOKENS_LUA, luaArgs: [tokensFile, "POST"] }),
  ),
  row(
    "idem-replay",
    false,
    `POST ${PATH} with the same Idempotency-Key per session: after the warm-up every request is a replay of the stored response (1 claim EVALSHA, the route does not run)`,
    (tokensFile) => ({
      luaScript: IDEM_LUA,
      luaArgs: [tokensFile, "POST", "same", `bench-${runId}`],
    }),
  ),
  row(
    "idem-fresh",
    false,
    `POST ${PATH} with a new Idempotency-Key every request: claim EVALSHA, the route, finish EVALSHA storing the response`,
    (tokensFile) => ({
      luaScript: IDEM_LUA,
      luaArgs: [tokensFile, "POST", "fresh", `bench-${runId}`],
    }),
  ),
];

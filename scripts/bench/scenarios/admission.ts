/**
 * Group "admission": a sale start driven far above the seckill admission limit
 * (src/services/seckill/admission.ts), beside the same swarm with the limit off.
 *
 * Both rows: the real app in its own bun process (servers/app-seckill.ts), SWARM (200) wrk
 * connections, WARM_TOKENS warm buyers' sessions round robin (wrk/admission-swarm.lua), a fresh
 * voucher per round whose stock (STOCK) outlasts any window, so every attempt is on sale and
 * wants Redis. The writer drains concurrently, as in production; after the window the round waits
 * (uncounted) until the outbox is empty and MySQL holds every order, and checks MySQL orders =
 * Redis buyers ≥ wrk's successes and the stock arithmetic (a failed check fails the row).
 *
 *   admission-off   SECKILL_ADMISSION_PER_SECOND=0: every attempt reaches Redis (the baseline);
 *   admission-sale  SECKILL_ADMISSION_PER_SECOND=R (BENCH_ADMISSION_R, default 1,000 — low, so this
 *                   2-core box can drive ≥ 10× R: a refused attempt costs about what a sold-out one
 *                   does, an admitted one a Redis round trip through the REST stand-in).
 *
 * The buyers are WARM_TOKENS distinct users and a holder is answered from the isolate's memo, so
 * the baseline's Redis load per round is one reserve per user (the most it can be at this drive).
 *
 * Columns, from the app's own Redis client (every command by kind, background included; the
 * writer's claims/acks/releases left out) over wrk's window:
 *   ÷ R                 attempts per second ÷ R (the drive; ≥ 10 is the issue's bench)
 *   reserve/s           reserve-stock EVALSHAs per second over the window (admitted attempts)
 *   max admitted/s      the largest count of the voucher's admission counter over the clock
 *                       seconds of the window (read from redis-server right after wrk): ≤ R
 *   lease/s             admission lease commands per second
 *   max Redis cmds in a clock s  every command the app's client sent (reserves, leases,
 *                       background and the writer's) in its busiest epoch second: ≈ R + leases
 *   busiest s cmds ÷ R  that ÷ R (issue 11: "Redis commands/s stay at the limit")
 *   Redis cmds/s        every request-side command per second (reserve + lease + the rest)
 *   other cmds/s        the rest: session sync, order-index flushes, UV, drain announcements —
 *                       background that does not grow with refused attempts
 *   refused/s           429 answers per second (answered from memory)
 *   Redis cmds/refused  (Redis cmds − reserve − lease − the baseline round's other cmds/s × window)
 *                       ÷ refused, floored at 0: what a refusal costs beyond the background (≈ 0)
 * The admission counters are per clock second and wrk's window is not aligned to them: a 2 s
 * window touches three clock seconds, each of which admits up to R at its start, so reserve/s
 * over the window may read up to R × 3/2; "max admitted/s" is the per-second figure.
 */
import { keys } from "../../../src/redis/keys.ts";
import {
  qstashQuiet,
  redisSummary,
  redisTotal,
  RESERVE,
  seckillStack,
  startAppServer,
  SWARM,
  unhandledErrors,
  waitUntil,
  warmTokensFile,
  WRITER_KINDS,
  type AppServer,
  type PipelineStats,
  type SeckillStack,
} from "../fixtures/seckill-stack.ts";
import { uncountedCpu } from "../lib/cpu.ts";
import { assertLoopback, formatInt } from "../lib/util.ts";
import { execWrk, parseWrkOutput } from "../lib/wrk.ts";
import { defineScenario, type BenchContext, type Measurement, type RunOptions, type Scenario } from "../types.ts";
import { join } from "node:path";

const GROUP = "admission";
const R = Number(process.env.BENCH_ADMISSION_R ?? 1000);
/** Units per round: more than any window can sell, so the whole window is "on sale". */
const STOCK = 1_000_000;
const WARM_TOKENS = 10_000;
const SHOPS = { off: 121, on: 122 } as const;
const LEASE = "evalsha seckillAdmission";
const SWARM_LUA = join(import.meta.dir, "../wrk/admission-swarm.lua");
const DRAIN_TIMEOUT_MS = 25_000;

/** The baseline's "other cmds/s" of the latest round, for the limited row's per-refusal cost. */
let baselineOtherPerS = Number.NaN;

function parseLine(out: string) {
  const m = /^ADMISSION successes=(\d+) duplicate=(\d+) refused=(\d+) other=(\d+)$/m.exec(out);
  if (!m) throw new Error(`wrk output has no ADMISSION line (is wrk/admission-swarm.lua's done() running?)\n${out}`);
  return { successes: Number(m[1]), duplicate: Number(m[2]), refused: Number(m[3]), other: Number(m[4]) };
}

async function round(
  ctx: BenchContext,
  stack: SeckillStack,
  app: AppServer,
  tokensFile: string,
  row: { name: string; shopId: number; limited: boolean; n: number },
  opts: RunOptions,
): Promise<Measurement> {
  const cfg = await stack.newVoucher({ shopId: row.shopId, stock: STOCK, buckets: 1 });
  const url = `${app.url}/api/voucher-order/seckill/${cfg.voucherId}`;
  assertLoopback(url);
  const seconds = Math.max(1, Math.round(opts.durationMs / 1000));
  await uncountedCpu(() => qstashQuiet(stack, app, 10_000));
  await app.ask<PipelineStats>({ type: "pipeline-stats", reset: true });
  const out = await execWrk(
    [
      `-t${ctx.threads}`,
      `-c${SWARM}`,
      `-d${seconds}s`,
      "--latency",
      "--timeout",
      "5s",
      "-s",
      SWARM_LUA,
      url,
      "--",
      tokensFile,
    ],
    seconds,
  );
  const p1 = await app.ask<PipelineStats>({ type: "pipeline-stats" });
  // The voucher's per-second admission counters (5 s TTL: the window's seconds are all there).
  const counterKeys = (await stack.raw.send("KEYS", [
    keys.seckill.admission(cfg.voucherId, 0).replace(/:0$/, ":*"),
  ])) as string[];
  const perSecond = counterKeys.length
    ? ((await stack.raw.send("MGET", counterKeys)) as (string | null)[]).map((v) => Number(v ?? 0))
    : [];
  const maxAdmitted = perSecond.length ? Math.max(...perSecond) : Number.NaN;
  const m = parseWrkOutput(out);
  const w = parseLine(out);

  const buyersKey = keys.seckill.buyers(row.shopId, cfg.voucherId);
  const outboxKey = keys.seckill.outbox(row.shopId);
  let last = { buyers: 0, outbox: 0, orders: 0 };
  await uncountedCpu(() =>
    waitUntil(
      () =>
        `the writer: ${last.orders} of ${last.buyers} orders in MySQL, ${last.outbox} reservations still in the outbox`,
      async () => {
        const [buyers, outbox] = (await Promise.all([
          stack.raw.send("SCARD", [buyersKey]),
          stack.raw.send("HLEN", [outboxKey]),
        ])) as [number, number];
        last = { buyers, outbox, orders: (await stack.mysqlCounts(cfg.voucherId)).orders };
        return outbox === 0 && last.orders === buyers;
      },
      DRAIN_TIMEOUT_MS,
      50,
    ),
  );
  await uncountedCpu(() => qstashQuiet(stack, app, 15_000));
  const left = Number((await stack.raw.send("GET", [keys.seckill.stock(row.shopId, cfg.voucherId, 0)])) ?? 0);
  const db = await stack.mysqlCounts(cfg.voucherId);
  const problems: string[] = [];
  if (last.buyers + left !== STOCK) problems.push(`Redis: ${last.buyers} buyers + ${left} left ≠ ${STOCK}`);
  if (db.orders !== last.buyers) problems.push(`MySQL has ${db.orders} orders, Redis ${last.buyers} buyers`);
  if (db.stock !== STOCK - last.buyers) problems.push(`MySQL stock ${db.stock} ≠ ${STOCK} − ${last.buyers}`);
  if (w.successes > last.buyers) problems.push(`wrk saw ${w.successes} successes, Redis has ${last.buyers} buyers`);
  if (w.other > 0) problems.push(`${w.other} answers were neither success, DUPLICATE_ORDER nor a 429`);
  if (!row.limited && w.refused > 0) problems.push(`${w.refused} refusals with the limit off`);
  if (row.limited && !(maxAdmitted <= R)) problems.push(`${maxAdmitted} admitted in one clock second, above R = ${R}`);
  if (problems.length) throw new Error(`${row.name}: ${problems.join("; ")}`);

  const redis = { ...p1.redis };
  for (const k of WRITER_KINDS) delete redis[k];
  const d = m.durationS;
  const reserve = redis[RESERVE] ?? 0;
  const lease = redis[LEASE] ?? 0;
  const total = redisTotal(redis);
  const other = total - reserve - lease;
  if (!row.limited) baselineOtherPerS = other / d;
  const refusedCost =
    row.limited && w.refused > 0 && Number.isFinite(baselineOtherPerS)
      ? Math.max(0, other - baselineOtherPerS * d) / w.refused
      : Number.NaN;
  // Every command the app's client sent (reserves, leases, background, the writer) in its busiest
  // clock second: the figure "Redis commands/s stay at the limit" is about (the limit is per second).
  const perSecondAll = Object.values(p1.redisPerSecond ?? {});
  const maxCmdsPerSecond = perSecondAll.length ? Math.max(...perSecondAll) : Number.NaN;
  const unhandled = unhandledErrors(p1);
  if (!opts.warmup) {
    ctx.log(
      `  ${row.name} #${row.n}: wrk ${formatInt(m.requests)} answers (${formatInt(w.successes)} ok, ${formatInt(w.duplicate)} DUPLICATE, ${formatInt(w.refused)} 429) in ${d.toFixed(2)} s; ` +
        `${formatInt(last.buyers)} sold, MySQL ${formatInt(db.orders)} orders; app-client Redis ${formatInt(total)} cmds: ${redisSummary(redis)}; admitted per clock second ${perSecond.join("/") || "—"}; all app-client commands per clock second ${perSecondAll.join("/") || "—"}; unhandled errors ${unhandled}`,
    );
  }
  return {
    ...m,
    // The 429s are the point of the row, not errors.
    errors: Math.max(0, m.errors - w.refused) + unhandled,
    extras: {
      "÷ R": m.rps / R,
      "reserve/s": reserve / d,
      "max admitted/s": maxAdmitted,
      "lease/s": lease / d,
      "max Redis cmds in a clock s": maxCmdsPerSecond,
      "busiest s cmds ÷ R": maxCmdsPerSecond / R,
      "Redis cmds/s": total / d,
      "other cmds/s": other / d,
      "refused/s": w.refused / d,
      "Redis cmds/refused": refusedCost,
      sold: last.buyers,
      "unhandled errors": unhandled,
    },
  };
}

function scenario(limited: boolean): Scenario {
  const name = limited ? "admission-sale" : "admission-off";
  return defineScenario({
    name,
    group: GROUP,
    baseline: !limited,
    description: limited
      ? `a sale start at SECKILL_ADMISSION_PER_SECOND=${R} (BENCH_ADMISSION_R): POST /api/voucher-order/seckill/{id} on the app (own bun process), ${SWARM} wrk connections, ${WARM_TOKENS.toLocaleString("en-US")} warm buyers round robin, stock that outlasts the window; ` +
        "at most R attempts per second reach Redis (reserve/s), the rest are 429 + Retry-After from the isolate at 0 Redis (Redis cmds/refused); the writer drains concurrently and MySQL is checked after each round"
      : `the same swarm with the admission limit off (SECKILL_ADMISSION_PER_SECOND=0): every attempt reaches Redis`,
    async setup(ctx) {
      const stack = await seckillStack(ctx);
      const app = await startAppServer(stack, { SECKILL_ADMISSION_PER_SECOND: limited ? String(R) : "0" });
      let tokensFile: string;
      try {
        tokensFile = await warmTokensFile(stack, WARM_TOKENS);
      } catch (e) {
        await app.stop();
        throw e;
      }
      let n = 0;
      return {
        kind: "run",
        run: (opts) =>
          round(
            ctx,
            stack,
            app,
            tokensFile,
            { name, shopId: limited ? SHOPS.on : SHOPS.off, limited, n: opts.warmup ? 0 : ++n },
            opts,
          ),
        teardown: app.stop,
      };
    },
  });
}

export default [scenario(false), scenario(true)];

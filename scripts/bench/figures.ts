/**
 * The headline figures of issue 9 ("one Redis command per flash-sale request"), issue 11
 * ("holding the line": the admission limit, a slow Redis, idempotent replays), issue 15 (the
 * seckill and the L1 read on each runtime ÷ that runtime's hello-world) and issue 18 (a sale over
 * N seckill shard databases under a per-database cap), read from a run's results: each is one
 * row's ratio or extra column, against the issue's target. run.ts prints them after the table and
 * puts them at the top of latest.md, latest.json and the chart. A figure whose row was not run
 * (--only) is left out.
 */
import type { ScenarioResult } from "./lib/report.ts";

export interface Figure {
  /** The issue whose table the figure answers. */
  issue: 9 | 11 | 15 | 18;
  figure: string;
  value: number;
  /** The issue's target: value op bound. */
  op: "≥" | "≤" | "=";
  bound: number;
  met: boolean;
  /** Where the number comes from: row and column. */
  source: string;
  detail?: string;
}

interface Spec {
  /** Default 9. */
  issue?: 11 | 15 | 18;
  figure: string;
  row: string;
  /** "ratio", "errors" (the row's error count) or an extras column. */
  column: string;
  op: Figure["op"];
  bound: number;
  detail?: (r: ScenarioResult) => string;
  /**
   * Rows whose `column` is summed into the figure together with `row`'s (e.g. the errors of a
   * runtime's sale, sold-out and L1 rows); a row of the list that did not run is left out.
   */
  plus?: string[];
}

const f2 = (n: number | undefined): string =>
  n === undefined || !Number.isFinite(n) ? "—" : n < 10 ? n.toFixed(2) : n.toFixed(0);

const SPECS: Spec[] = [
  { figure: "seckill rps ÷ raw EVALSHA, on sale", row: "seckill-sale", column: "ratio", op: "≥", bound: 0.6 },
  { figure: "seckill rps ÷ raw EVALSHA, sold out", row: "seckill-sold-out", column: "ratio", op: "≥", bound: 0.6 },
  {
    figure: "seckill rps ÷ raw EVALSHA, whole window (500 units, then sold out)",
    row: "seckill-endpoint",
    column: "ratio",
    op: "≥",
    bound: 0.6,
  },
  {
    figure: "Redis cmds per attempt while stock lasts (app client, background + writer incl.)",
    row: "seckill-sale",
    column: "sale: Redis cmds/attempt",
    op: "≤",
    bound: 1.2,
    detail: (r) =>
      `reserve EVALSHA ${f2(r.extras["sale: reserve EVALSHA/attempt"])} + other ${r.extras["sale: other cmds/attempt"]?.toFixed(3) ?? "—"} per attempt`,
  },
  {
    figure: "… of which on the response path (reserve-stock EVALSHA)",
    row: "seckill-sale",
    column: "sale: reserve EVALSHA/attempt",
    op: "=",
    bound: 1,
  },
  {
    figure: "Redis cmds per attempt after sell-out",
    row: "seckill-sold-out",
    column: "sold out: Redis cmds/attempt",
    op: "≤",
    bound: 0.05,
  },
  {
    figure: "… sold-out phase of seckill-endpoint",
    row: "seckill-endpoint",
    column: "sold out: Redis cmds/attempt",
    op: "≤",
    bound: 0.05,
  },
  { figure: "Redis cmds per warm GET /api/user/me", row: "user-me", column: "Redis cmds/req", op: "≤", bound: 0.05 },
  {
    figure: "sold-out phase rps ÷ Hono hello-world (200 connections)",
    row: "seckill-sold-out",
    column: "÷ hello",
    op: "≥",
    bound: 0.7,
  },
  {
    figure: "L1-hit GET /api/shop/{id} rps ÷ Hono hello-world",
    row: "shop-l1",
    column: "ratio",
    op: "≥",
    bound: 0.8,
    detail: (r) => `CPU ${f2(r.cpuUsPerOp)} µs/op`,
  },
  {
    figure: "warm GET /api/user/me rps ÷ Hono hello-world",
    row: "user-me",
    column: "ratio",
    op: "≥",
    bound: 0.7,
    detail: (r) => `CPU ${f2(r.cpuUsPerOp)} µs/op`,
  },
  {
    figure: "seckill p99 ÷ p50 at 200 connections, on sale",
    row: "seckill-sale",
    column: "p99÷p50",
    op: "≤",
    bound: 3,
    detail: (r) => `p50 ${f2(r.p50Ms)} ms, p99 ${f2(r.p99Ms)} ms`,
  },
  {
    figure: "seckill p99 ÷ p50 at 200 connections, sold out",
    row: "seckill-sold-out",
    column: "p99÷p50",
    op: "≤",
    bound: 3,
    detail: (r) => `p50 ${f2(r.p50Ms)} ms, p99 ${f2(r.p99Ms)} ms`,
  },
  {
    figure: "seckill p99 ÷ p50 at 200 connections, whole window",
    row: "seckill-endpoint",
    column: "p99÷p50",
    op: "≤",
    bound: 3,
    detail: (r) => `p50 ${f2(r.p50Ms)} ms, p99 ${f2(r.p99Ms)} ms`,
  },
  {
    figure: "L1 read p50 beside hostile bodies ÷ its quiet p50 (same round)",
    row: "shop-l1-hostile",
    column: "p50 ÷ quiet",
    op: "≤",
    bound: 2,
    detail: (r) => `quiet ${f2(r.extras["quiet p50 ms"])} ms, beside hostile bodies ${f2(r.p50Ms)} ms`,
  },
  // Issue 11: every protection's bench (admission at ≥ 10× R, a slow Redis, idempotent replays).
  {
    issue: 11,
    figure: "admission: sale-start drive ÷ R (attempts/s over the admission limit)",
    row: "admission-sale",
    column: "÷ R",
    op: "≥",
    bound: 10,
  },
  {
    issue: 11,
    figure: "admission: busiest clock second's Redis cmds (all, app client) ÷ R",
    row: "admission-sale",
    column: "busiest s cmds ÷ R",
    op: "≤",
    bound: 1.05,
    detail: (r) =>
      `${f2(r.extras["max Redis cmds in a clock s"])} cmds; ${f2(r.extras["max admitted/s"])} admitted; leases ${f2(r.extras["lease/s"])}/s`,
  },
  {
    issue: 11,
    figure: "admission: Redis cmds per refused attempt",
    row: "admission-sale",
    column: "Redis cmds/refused",
    op: "≤",
    bound: 0.001,
    detail: (r) => `${f2(r.extras["refused/s"])} refused/s`,
  },
  {
    issue: 11,
    figure: "slow Redis (300 ms): L1 read p99 ÷ the same round's quiet p99",
    row: "slow-redis-l1",
    column: "p99 ÷ quiet",
    op: "≤",
    bound: 2,
    detail: (r) => `quiet ${f2(r.extras["quiet p99 ms"])} ms, slow ${f2(r.p99Ms)} ms`,
  },
  {
    issue: 11,
    figure: "idempotent replay: Redis cmds of the key per request",
    row: "idem-replay",
    column: "idem cmds/req",
    op: "=",
    bound: 1,
    detail: (r) => `rps ÷ unkeyed ${f2(r.ratio)}, CPU ${f2(r.cpuUsPerOp)} µs/op`,
  },
  {
    issue: 11,
    figure: "idempotent first run: Redis cmds of the key per request",
    row: "idem-fresh",
    column: "idem cmds/req",
    op: "=",
    bound: 2,
    detail: (r) => `rps ÷ unkeyed ${f2(r.ratio)}`,
  },
  // Issue 15: per runtime (scenarios/runtimes.ts), each ÷ the same runtime's hello-world in the same rounds.
  ...(["bun", "workerd", "deno"] as const).flatMap((rt): Spec[] => [
    {
      issue: 15,
      figure: `${rt}: seckill sale rps ÷ ${rt} hello-world (POST, 200 connections)`,
      row: `${rt}-sale`,
      column: "÷ hello",
      op: "≥",
      bound: 0.5,
      detail: (r) =>
        `${f2(r.rps)} req/s; Redis cmds ${r.extras["Redis cmds/attempt"]?.toFixed(3) ?? "—"}, REST trips ${r.extras["REST trips/attempt"]?.toFixed(3) ?? "—"} per attempt`,
    },
    {
      issue: 15,
      figure: `${rt}: L1-hit GET /api/shop/{id} rps ÷ ${rt} hello-world`,
      row: `${rt}-shop-l1`,
      column: "÷ hello",
      op: "≥",
      bound: 0.7,
      detail: (r) => `${f2(r.rps)} req/s, CPU ${f2(r.cpuUsPerOp)} µs/op`,
    },
    {
      issue: 15,
      figure: `${rt}: errors in the sale, sold-out and L1 rows`,
      row: `${rt}-sale`,
      plus: [`${rt}-sold-out`, `${rt}-shop-l1`],
      column: "errors",
      op: "=",
      bound: 0,
    },
  ]),
  // Issue 18 item 7: the same sale over N shard databases, each capped at C commands/s (scenarios/shards.ts).
  ...([1, 2, 4] as const).flatMap((n): Spec[] => [
    {
      issue: 18,
      figure: `${n} shard${n > 1 ? "s" : ""}: admitted attempts/s ÷ the per-database cap`,
      row: `shards-${n}`,
      column: "admitted/s ÷ C",
      op: "≥",
      bound: 0.9 * n,
      detail: (r) =>
        `${f2(r.rps)} attempts/s; slowest shard ${f2(r.extras["min shard ÷ C"])} × C; ${f2(r.extras["refused/s"])} refusals/s on top (demand above the budgets)`,
    },
    {
      issue: 18,
      figure: `${n} shard${n > 1 ? "s" : ""}: busiest second's commands offered to a database ÷ its cap`,
      row: `shards-${n}`,
      column: "busiest offered ÷ C",
      op: "≤",
      bound: 1,
      detail: (r) =>
        `served ${f2(r.extras["busiest s ÷ C"])} × C; ${f2(r.extras["throttled cmds"])} commands throttled`,
    },
    {
      issue: 18,
      figure: `${n} shard${n > 1 ? "s" : ""}: Redis cmds per admitted attempt (all databases, background and writer incl.; issue 9's bound)`,
      row: `shards-${n}`,
      column: "cmds/admitted",
      op: "≤",
      bound: 1.2,
      detail: (r) =>
        `main database ${f2(r.extras["main cmds in sale"])} cmds in the sale (${f2(r.extras["main cmds/s"])}/s)`,
    },
    {
      issue: 18,
      figure: `${n} shard${n > 1 ? "s" : ""}: units left unsold after the crowd`,
      row: `shards-${n}`,
      column: "units left",
      op: "=",
      bound: 0,
      detail: (r) =>
        `tail ${f2(r.extras["tail ms"])} ms from the first dry shard to the last unit; ${f2(r.extras["units moved"])} units moved in ${f2(r.extras.refills)} refills`,
    },
    {
      issue: 18,
      figure: `${n} shard${n > 1 ? "s" : ""}: SOLD_OUT answers while units were still to be sold`,
      row: `shards-${n}`,
      column: "early SOLD_OUT",
      op: "=",
      bound: 0,
    },
    {
      issue: 18,
      figure: `${n} shard${n > 1 ? "s" : ""}: errors (socket, 5xx, unexpected answers, unhandled)`,
      row: `shards-${n}`,
      column: "errors",
      op: "=",
      bound: 0,
    },
  ]),
  // The end-phase stress row: every buyer homed on shard 1 of 4, most units reach them through refills.
  {
    issue: 18,
    figure: "4 shards, every buyer homed on one: units left unsold after the crowd",
    row: "shards-4-one-home",
    column: "units left",
    op: "=",
    bound: 0,
    detail: (r) =>
      `sale ${f2(r.extras["sale s"])} s, tail ${f2(r.extras["tail ms"])} ms after shard 1 ran dry; ${f2(r.extras["units moved"])} units moved in ${f2(r.extras.refills)} refills, ${f2(r.extras.retries)} retries`,
  },
  {
    issue: 18,
    figure: "4 shards, every buyer homed on one: busiest second's commands offered to a database ÷ its cap",
    row: "shards-4-one-home",
    column: "busiest offered ÷ C",
    op: "≤",
    bound: 1,
    detail: (r) => `served ${f2(r.extras["busiest s ÷ C"])} × C; ${f2(r.extras["throttled cmds"])} commands throttled`,
  },
  {
    issue: 18,
    figure: "4 shards, every buyer homed on one: SOLD_OUT answers while units were still to be sold",
    row: "shards-4-one-home",
    column: "early SOLD_OUT",
    op: "=",
    bound: 0,
    detail: (r) =>
      `${f2(r.extras["units in move logs"])} units in move logs, ${f2(r.extras["outbox left"])} written orders still in an outbox`,
  },
  {
    issue: 18,
    figure: "4 shards, every buyer homed on one: errors",
    row: "shards-4-one-home",
    column: "errors",
    op: "=",
    bound: 0,
  },
];

export function issueFigures(results: readonly ScenarioResult[]): Figure[] {
  const out: Figure[] = [];
  const columnValue = (r: ScenarioResult, column: string): number | undefined =>
    column === "ratio" ? r.ratio : column === "errors" ? r.errors : r.extras[column];
  for (const s of SPECS) {
    const r = results.find((x) => x.name === s.row && x.status === "ok");
    if (!r) continue;
    let value = columnValue(r, s.column);
    if (value === undefined || !Number.isFinite(value)) continue;
    const others = (s.plus ?? [])
      .map((name) => results.find((x) => x.name === name && x.status === "ok"))
      .filter((x): x is ScenarioResult => x !== undefined);
    for (const o of others) value += columnValue(o, s.column) ?? 0;
    const met = s.op === "≥" ? value >= s.bound : s.op === "≤" ? value <= s.bound : Math.abs(value - s.bound) < 0.005;
    const source = `${[s.row, ...others.map((o) => o.name)].join(" + ")} · ${s.column}`;
    const detail = s.detail
      ? s.detail(r)
      : others.length
        ? [r, ...others].map((x) => `${x.name} ${columnValue(x, s.column) ?? "—"}`).join(", ")
        : undefined;
    out.push({
      issue: s.issue ?? 9,
      figure: s.figure,
      value,
      op: s.op,
      bound: s.bound,
      met,
      source,
      ...(detail ? { detail } : {}),
    });
  }
  return out;
}

const fmt = (n: number): string =>
  n !== 0 && Math.abs(n) < 0.001 ? n.toPrecision(2) : Math.abs(n) < 0.1 && n !== 0 ? n.toFixed(3) : n.toFixed(2);

export function figuresMarkdown(figs: readonly Figure[]): string {
  if (figs.length === 0) return "";
  const rows = figs.map(
    (f) =>
      `| ${f.issue} | ${f.figure} | **${fmt(f.value)}** | ${f.op} ${f.bound} | ${f.met ? "yes" : "**no**"} | ${f.source}${f.detail ? ` (${f.detail})` : ""} |`,
  );
  return ["| issue | figure | this run | target | met | row · column |", "|--:|---|--:|---|---|---|", ...rows].join(
    "\n",
  );
}

/** One line per figure for the chart. */
export function figureLines(figs: readonly Figure[]): Array<{ text: string; met: boolean }> {
  return figs.map((f) => ({
    text: `#${f.issue} ${f.figure}: ${fmt(f.value)} (target ${f.op} ${f.bound})`,
    met: f.met,
  }));
}

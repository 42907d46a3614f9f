/**
 * Bench runner: measures every registered scenario (scripts/bench/scenarios/*.ts) side by side in
 * one run and reports each against its group's baseline.
 *
 *   bun scripts/bench/run.ts [--duration 2s] [--rounds 5] [--warmup 1s] [--connections 64]
 *                            [--threads 1] [--only name|group,...] [--out bench-results] [--list]
 *
 * Why ratios: the 2-core machine is shared and its speed drifts over minutes, so an absolute
 * req/s from today cannot be compared with one from yesterday. Scenarios of a group are measured
 * in interleaved rounds (baseline, A, B, then B, A, baseline, ...) so drift hits all of them
 * alike, and the reported ratio is the median of per-round ratios. Defaults favour more, shorter
 * rounds (5 × 2 s): other jobs on the box load it in bursts of seconds, and a pair measured a
 * few seconds apart sees the same background more often than one measured 10 s apart.
 *
 * Outputs: the Markdown table on stdout; <out>/latest.md, latest.json and latest.png.
 */
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, release, tmpdir, totalmem } from "node:os";
import { join, relative, resolve } from "node:path";
import { figuresMarkdown, issueFigures } from "./figures.ts";
import { cpuMsSince, cpuSnapshot } from "./lib/cpu.ts";
import { Progress } from "./lib/progress.ts";
import {
  chartSvg,
  jsonReport,
  markdownReport,
  markdownTable,
  renderPng,
  type RunInfo,
  type ScenarioResult,
} from "./lib/report.ts";
import { formatInt, formatNum, median, medianIndex, parseDuration, withTimeout } from "./lib/util.ts";
import { runWrk } from "./lib/wrk.ts";
import type { BenchContext, Measurement, Scenario, SharedResource, Target } from "./types.ts";

// ------------------------------------------------------------------------------------- options

const errText = (e: unknown): string => (e instanceof Error ? e.message : String(e));

/** A mistake on the command line: reported without a stack trace. */
class UsageError extends Error {}

interface Options {
  durationMs: number;
  rounds: number;
  warmupMs: number;
  connections: number;
  threads: number;
  only: string[] | null;
  out: string;
  list: boolean;
}

const USAGE = `usage: bun scripts/bench/run.ts [options]
  --duration 2s        measured window per round (wrk needs whole seconds)
  --rounds 5           measured rounds per scenario, interleaved with the group's baseline
  --warmup 1s          unmeasured window per scenario before the rounds (0 to skip)
  --connections 64     wrk -c / concurrent loops of in-process drivers
  --threads 1          wrk -t (1 leaves the other core to the server)
  --only a,b           scenario, group or set names (e.g. runtimes); each group's baseline is always added
  --out bench-results  output directory for latest.{md,json,png}
  --list               list scenarios and exit`;

function parseArgs(argv: string[]): Options {
  const o: Options = {
    durationMs: 2000,
    rounds: 5,
    warmupMs: 1000,
    connections: 64,
    threads: 1,
    only: null,
    out: "bench-results",
    list: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const [flag, inline] =
      a.startsWith("--") && a.includes("=")
        ? [a.slice(0, a.indexOf("=")), a.slice(a.indexOf("=") + 1)]
        : [a, undefined];
    const value = (): string => {
      const v = inline ?? argv[++i];
      if (v === undefined) throw new UsageError(`${flag} needs a value\n${USAGE}`);
      return v;
    };
    const duration = (v: string): number => {
      try {
        return parseDuration(v);
      } catch (e) {
        throw new UsageError(`${flag}: ${errText(e)}`);
      }
    };
    const int = (min: number, max: number): number => {
      const v = value();
      const n = Number(v);
      if (!Number.isInteger(n) || n < min || n > max)
        throw new UsageError(`${flag} must be an integer in [${min}, ${max}], got ${v}`);
      return n;
    };
    switch (flag) {
      case "--duration":
        o.durationMs = duration(value());
        break;
      case "--warmup":
        o.warmupMs = duration(value());
        break;
      case "--rounds":
        o.rounds = int(1, 20);
        break;
      case "--connections":
        o.connections = int(1, 10_000);
        break;
      case "--threads":
        o.threads = int(1, 64);
        break;
      case "--only":
        o.only = value()
          .split(",")
          .map((s) => s.trim())
          .filter(Boolean);
        break;
      case "--out":
        o.out = value();
        break;
      case "--list":
        o.list = true;
        break;
      case "-h":
      case "--help":
        console.log(USAGE);
        process.exit(0);
        break;
      default:
        throw new UsageError(`unknown argument ${a}\n${USAGE}`);
    }
  }
  // wrk takes whole seconds; bounded so a typo cannot start an hour-long run.
  if (o.durationMs < 1000 || o.durationMs > 120_000) throw new UsageError("--duration must be between 1s and 120s");
  if (o.warmupMs !== 0 && (o.warmupMs < 1000 || o.warmupMs > 60_000))
    throw new UsageError("--warmup must be 0 or between 1s and 60s");
  o.durationMs = Math.round(o.durationMs / 1000) * 1000;
  o.warmupMs = Math.round(o.warmupMs / 1000) * 1000;
  if (o.connections < o.threads) throw new UsageError("--connections must be ≥ --threads (a wrk requirement)");
  return o;
}

// ----------------------------------------------------------------------------------- discovery

function isScenario(x: unknown): x is Scenario {
  const s = x as Partial<Scenario> | null;
  return !!s && typeof s.name === "string" && typeof s.group === "string" && typeof s.setup === "function";
}

/** Every .ts file in scenarios/ default-exports a Scenario or an array of them. */
async function discover(): Promise<Scenario[]> {
  const dir = join(import.meta.dir, "scenarios");
  const files = readdirSync(dir)
    .filter((f) => f.endsWith(".ts") && !f.endsWith(".d.ts"))
    .sort();
  const all: Scenario[] = [];
  for (const f of files) {
    const mod = (await import(join(dir, f))) as { default?: unknown };
    const items = Array.isArray(mod.default) ? mod.default : [mod.default];
    for (const s of items) {
      if (!isScenario(s))
        throw new Error(`scenarios/${f}: default export must be a Scenario (name, group, setup) or an array of them`);
      all.push(s);
    }
  }
  const names = new Set<string>();
  for (const s of all) {
    if (names.has(s.name)) throw new Error(`duplicate scenario name "${s.name}"`);
    names.add(s.name);
  }
  for (const s of all) {
    for (const t of s.ratioTo ?? []) {
      if (!all.some((x) => x.name === t.scenario && x.group === s.group))
        throw new Error(`${s.name}: ratioTo names "${t.scenario}", not a scenario of group "${s.group}"`);
    }
  }
  for (const g of new Set(all.map((s) => s.group))) {
    const bases = all.filter((s) => s.group === g && s.baseline);
    if (bases.length !== 1) throw new Error(`group "${g}" needs exactly one baseline scenario, has ${bases.length}`);
  }
  // Groups alphabetically; the baseline first inside each group, then by name.
  return all.sort(
    (a, b) =>
      a.group.localeCompare(b.group) || Number(!!b.baseline) - Number(!!a.baseline) || a.name.localeCompare(b.name),
  );
}

function select(all: Scenario[], only: string[] | null): Scenario[] {
  if (!only) return all;
  const known = new Set([
    ...all.map((s) => s.name),
    ...all.map((s) => s.group),
    ...all.flatMap((s) => (s.set ? [s.set] : [])),
  ]);
  const unknown = only.filter((x) => !known.has(x));
  if (unknown.length) throw new UsageError(`--only: unknown scenario, group or set ${unknown.join(", ")}; try --list`);
  const picked = all.filter(
    (s) => only.includes(s.name) || only.includes(s.group) || (s.set !== undefined && only.includes(s.set)),
  );
  const groups = new Set(picked.map((s) => s.group));
  const also = new Set(picked.flatMap((s) => (s.ratioTo ?? []).map((t) => t.scenario)));
  // A ratio needs its baseline (and any ratioTo scenario) measured in the same rounds.
  return all.filter((s) => picked.includes(s) || (s.baseline && groups.has(s.group)) || also.has(s.name));
}

// --------------------------------------------------------------------------------- machine info

async function firstLine(cmd: string[]): Promise<string> {
  try {
    const p = Bun.spawn(cmd, { stdout: "pipe", stderr: "pipe" });
    const [out, err] = await withTimeout(
      Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]),
      5000,
      cmd[0]!,
    );
    return (out || err).split("\n")[0]?.trim() || "unknown";
  } catch {
    return "unavailable";
  }
}

async function machineInfo(): Promise<Record<string, string>> {
  const cpu = cpus();
  const git = await firstLine(["git", "rev-parse", "--short", "HEAD"]);
  const dirty = await firstLine(["git", "status", "--porcelain"]);
  return {
    CPU: `${cpu[0]?.model.trim() ?? "unknown"} × ${cpu.length}`,
    Memory: `${(totalmem() / 2 ** 30).toFixed(1)} GiB`,
    Kernel: `${process.platform} ${release()}`,
    Bun: Bun.version,
    wrk: (await firstLine(["wrk", "--version"])).replace(/\s*Copyright.*$/, ""),
    "redis-server": await firstLine(["redis-server", "--version"]),
    Git: /^[0-9a-f]{4,}$/.test(git)
      ? `${git}${dirty && dirty !== "unknown" ? " (uncommitted changes)" : ""}`
      : "no commit",
    "Load average at start": loadavg()
      .map((x) => x.toFixed(2))
      .join(" "),
  };
}

// ---------------------------------------------------------------------------------------- run

interface Live {
  scenario: Scenario;
  target: Target | null;
  error: string | null;
  rounds: Array<Measurement | null>;
}

async function main(): Promise<void> {
  const opts = parseArgs(process.argv.slice(2));
  const all = await discover();
  if (opts.list) {
    for (const s of all)
      console.log(`${s.group.padEnd(8)} ${s.baseline ? "*" : " "} ${s.name.padEnd(28)} ${s.description}`);
    const sets = [...new Set(all.flatMap((s) => (s.set ? [s.set] : [])))];
    console.log("\n* = group baseline");
    for (const set of sets)
      console.log(
        `set "${set}" (--only ${set}): groups ${[...new Set(all.filter((s) => s.set === set).map((s) => s.group))].join(", ")}`,
      );
    return;
  }
  const scenarios = select(all, opts.only);
  const groups = [...new Set(scenarios.map((s) => s.group))];
  const t0 = performance.now();
  const date = new Date().toISOString();
  const command = ["bun", relative(process.cwd(), process.argv[1] ?? "scripts/bench/run.ts"), ...process.argv.slice(2)]
    .map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`))
    .join(" ");
  const machine = await machineInfo();

  const steps = scenarios.length * (opts.rounds + (opts.warmupMs > 0 ? 1 : 0));
  // ~1 s per scenario for setup, warm-up spin-up and teardown on top of the measured windows.
  const estimateS = scenarios.length * ((opts.warmupMs + opts.rounds * opts.durationMs) / 1000 + 1);
  process.stderr.write(
    `bench: ${scenarios.length} scenarios in ${groups.length} groups, ${opts.rounds} rounds × ${opts.durationMs / 1000} s, ` +
      `warm-up ${opts.warmupMs / 1000} s — about ${Math.ceil(estimateS)} s\n`,
  );
  const progress = new Progress(steps, estimateS);

  const tmpDir = mkdtempSync(join(tmpdir(), "cityhub-bench-"));
  const shared = new Map<string, Promise<SharedResource<unknown>>>();
  const live: Live[] = [];

  /** Everything that must be stopped: active targets, then shared resources, then the temp dir. */
  const cleanup = async (): Promise<void> => {
    for (const l of live) {
      const t = l.target;
      l.target = null;
      if (t)
        await withTimeout(t.teardown(), 10_000, `${l.scenario.name} teardown`).catch((e: unknown) =>
          progress.log(`teardown ${l.scenario.name}: ${errText(e)}`),
        );
    }
    for (const [key, p] of shared) {
      shared.delete(key);
      await p.then((r) => withTimeout(r.stop(), 10_000, `${key} stop`)).catch(() => {});
    }
    rmSync(tmpDir, { recursive: true, force: true });
  };
  let interrupted = false;
  const onSignal = (sig: string) => {
    if (interrupted) process.exit(130);
    interrupted = true;
    progress.stop();
    process.stderr.write(`\nbench: ${sig}, stopping servers…\n`);
    void cleanup().finally(() => process.exit(130));
  };
  process.on("SIGINT", () => onSignal("SIGINT"));
  process.on("SIGTERM", () => onSignal("SIGTERM"));

  const ctx: BenchContext = {
    durationMs: opts.durationMs,
    connections: opts.connections,
    threads: opts.threads,
    tmpDir,
    log: (m) => progress.log(m),
    shared: <T>(key: string, start: () => Promise<SharedResource<T>>): Promise<T> => {
      let p = shared.get(key);
      if (!p) {
        p = start() as Promise<SharedResource<unknown>>;
        shared.set(key, p);
      }
      return p.then((r) => r.value as T);
    },
  };

  const measureOnce = async (t: Target, name: string, durationMs: number, warmup: boolean): Promise<Measurement> => {
    if (t.kind === "http") {
      if (!warmup) await t.beforeRound?.();
      const m = await runWrk(t, { durationMs, connections: opts.connections, threads: opts.threads, tmpDir });
      if (!warmup && t.afterRound) m.extras = { ...m.extras, ...(await t.afterRound()) };
      return m;
    }
    return await withTimeout(
      t.run({ durationMs, concurrency: opts.connections, warmup }),
      durationMs + 30_000,
      `${name} run`,
    );
  };
  const measure = async (l: Live, durationMs: number, warmup: boolean): Promise<Measurement> => {
    const t = l.target;
    if (!t) throw new Error("not set up");
    // The snapshot also covers beforeRound/afterRound and IPC, a few ms against seconds of load.
    const cpu = warmup ? null : cpuSnapshot();
    const m = await measureOnce(t, l.scenario.name, durationMs, warmup);
    if (cpu && m.requests > 0) m.cpuUsPerOp = (cpuMsSince(cpu) * 1000) / m.requests;
    return m;
  };

  const summary = (name: string, m: Measurement): string =>
    `  ${name.padEnd(28)} ${formatInt(m.rps).padStart(9)} ops/s  p50 ${formatNum(m.p50Ms)} ms  p99 ${formatNum(m.p99Ms)} ms` +
    (m.cpuUsPerOp !== undefined ? `  CPU ${formatNum(m.cpuUsPerOp)} µs/op` : "") +
    (m.errors ? `  ${formatInt(m.errors)} errors` : "") +
    Object.entries(m.extras ?? {})
      .map(([k, v]) => `  ${k} ${formatNum(v)}`)
      .join("");

  for (const g of groups) {
    const members: Live[] = scenarios
      .filter((s) => s.group === g)
      .map((s) => ({ scenario: s, target: null, error: null, rounds: [] }));
    live.push(...members);
    progress.log(`group "${g}": ${members.map((m) => m.scenario.name).join(", ")}`);
    for (const l of members) {
      try {
        l.target = await withTimeout(l.scenario.setup(ctx), 60_000, `${l.scenario.name} setup`);
      } catch (e) {
        l.error = `setup: ${errText(e)}`;
        progress.log(`  ${l.scenario.name}: ${l.error}`);
      }
    }
    // Warm-up: JIT, connection pools and caches settle before anything counts.
    for (const l of members) {
      if (opts.warmupMs === 0) break;
      progress.start(`${l.scenario.name} warm-up`, opts.warmupMs / 1000 + 1);
      if (l.target && !l.error)
        await measure(l, opts.warmupMs, true).catch((e: unknown) => (l.error = `warm-up: ${errText(e)}`));
      progress.finish(l.error?.startsWith("warm-up:") ? `  ${l.scenario.name}: ${l.error}` : undefined);
    }
    for (let r = 0; r < opts.rounds; r++) {
      // Reverse the order every other round so no scenario always runs right after another one.
      const order = r % 2 === 0 ? members : [...members].reverse();
      for (const l of order) {
        progress.start(`${l.scenario.name} round ${r + 1}/${opts.rounds}`, opts.durationMs / 1000);
        let m: Measurement | null = null;
        if (l.target && !l.error) {
          try {
            m = await measure(l, opts.durationMs, false);
          } catch (e) {
            l.error = `round ${r + 1}: ${errText(e)}`;
          }
        }
        l.rounds[r] = m;
        // A failure is logged once, in the round where it happened; later rounds skip the scenario.
        progress.finish(
          m
            ? summary(`${l.scenario.name} #${r + 1}`, m)
            : l.error?.startsWith(`round ${r + 1}:`)
              ? `  ${l.scenario.name}: ${l.error}`
              : undefined,
        );
      }
    }
    for (const l of members) {
      const t = l.target;
      l.target = null;
      if (t)
        await withTimeout(t.teardown(), 10_000, `${l.scenario.name} teardown`).catch((e: unknown) =>
          progress.log(`teardown ${l.scenario.name}: ${errText(e)}`),
        );
    }
  }
  progress.stop();
  await cleanup();

  const results = live.map((l) =>
    toResult(
      l,
      live.find((b) => b.scenario.group === l.scenario.group && b.scenario.baseline),
      live,
    ),
  );
  const info: RunInfo = {
    date,
    command,
    options: {
      durationMs: opts.durationMs,
      connections: opts.connections,
      threads: opts.threads,
      rounds: opts.rounds,
      warmupMs: opts.warmupMs,
    },
    machine: {
      ...machine,
      "Load average at end": loadavg()
        .map((x) => x.toFixed(2))
        .join(" "),
    },
    elapsedS: (performance.now() - t0) / 1000,
  };

  const figures = issueFigures(results);
  console.log(markdownTable(results));
  if (figures.length) console.log(`\n${figuresMarkdown(figures)}`);
  for (const r of results) if (r.status === "failed") console.log(`\n${r.name} failed: ${r.error ?? ""}`);
  const out = resolve(opts.out);
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, "latest.md"), markdownReport(results, info, figures));
  writeFileSync(join(out, "latest.json"), jsonReport(results, info, figures));
  writeFileSync(join(out, "latest.png"), renderPng(chartSvg(results, info, figures)));
  process.stderr.write(
    `bench: wrote ${relative(process.cwd(), out) || "."}/latest.{md,json,png} in ${info.elapsedS.toFixed(0)} s\n`,
  );
  if (results.some((r) => r.status === "failed")) process.exitCode = 1;
}

/** Paired ratios: round r of `l` against round r of `base`, adjacent in time; their median. */
function pairedRatio(l: Live, base: Live | undefined): number {
  const ratios: number[] = [];
  for (let r = 0; r < l.rounds.length; r++) {
    const a = l.rounds[r];
    const b = base?.rounds[r];
    if (a && b && b.rps > 0) ratios.push(a.rps / b.rps);
  }
  return median(ratios);
}

function toResult(l: Live, base: Live | undefined, all: readonly Live[]): ScenarioResult {
  const s = l.scenario;
  const ok = l.rounds.filter((m): m is Measurement => m !== null);
  const failed = l.error !== null || ok.length === 0;
  const rpss = ok.map((m) => m.rps);
  const mid = ok[medianIndex(rpss)];
  const med = median(rpss);
  const extraRatios: Record<string, number> = {};
  for (const t of s.ratioTo ?? []) {
    const other = all.find((x) => x.scenario.name === t.scenario && x.scenario.group === s.group);
    extraRatios[t.column] = other ? pairedRatio(l, other) : Number.NaN;
  }
  return {
    name: s.name,
    group: s.group,
    baseline: !!s.baseline,
    description: s.description,
    status: failed ? "failed" : "ok",
    ...(l.error ? { error: l.error } : failed ? { error: "no round completed" } : {}),
    rounds: ok,
    rps: med,
    p50Ms: mid?.p50Ms ?? Number.NaN,
    p99Ms: mid?.p99Ms ?? Number.NaN,
    // Median over rounds on its own: it is steadier than rps, no need to tie it to the median round.
    cpuUsPerOp: median(ok.flatMap((m) => (m.cpuUsPerOp === undefined ? [] : [m.cpuUsPerOp]))),
    errors: ok.reduce((n, m) => n + m.errors, 0),
    extras: { ...(mid?.extras ?? {}), ...extraRatios },
    ratio: s.baseline ? 1 : pairedRatio(l, base),
    spread: rpss.length > 1 ? (Math.max(...rpss) - Math.min(...rpss)) / med : 0,
  };
}

main().catch((e: unknown) => {
  process.stderr.write(
    `bench: ${e instanceof UsageError ? e.message : e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`,
  );
  process.exit(1);
});

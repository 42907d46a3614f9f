/**
 * Turns the run's results into the three outputs: a Markdown table (stdout and latest.md), JSON
 * (latest.json, for tooling and later comparisons) and a bar chart (latest.png: hand-built SVG
 * rendered by resvg, so the report needs no browser and no charting library).
 */
import { Resvg } from "@resvg/resvg-js";
import { existsSync } from "node:fs";
import { figureLines, figuresMarkdown, type Figure } from "../figures.ts";
import type { Extras, Measurement } from "../types.ts";
import { formatInt, formatNum } from "./util.ts";

export interface ScenarioResult {
  name: string;
  group: string;
  baseline: boolean;
  description: string;
  /** "failed" when setup or any round threw; `error` says why. */
  status: "ok" | "failed";
  error?: string;
  /** Measured rounds in order (warm-up excluded). */
  rounds: Measurement[];
  /** rps = median over rounds; latencies and extras from the round whose rps is nearest that median. */
  rps: number;
  p50Ms: number;
  p99Ms: number;
  /** Median over rounds of CPU µs per op (runner + its child processes, not wrk); NaN if unknown. */
  cpuUsPerOp: number;
  errors: number;
  extras: Extras;
  /** Median over rounds of rps / baseline rps in the same round; 1 for the baseline. */
  ratio: number;
  /** (max − min) / median of the rounds' rps: how noisy this scenario was in this run. */
  spread: number;
}

export interface RunInfo {
  date: string;
  command: string;
  options: { durationMs: number; connections: number; threads: number; rounds: number; warmupMs: number };
  machine: Record<string, string>;
  elapsedS: number;
}

function extraKeys(results: readonly ScenarioResult[]): string[] {
  const keys = new Set<string>();
  for (const r of results) for (const k of Object.keys(r.extras)) keys.add(k);
  return [...keys];
}

export function markdownTable(results: readonly ScenarioResult[]): string {
  const extras = extraKeys(results);
  const head = ["scenario", "group", "rps", "p50 ms", "p99 ms", "ratio", "CPU µs/op", ...extras, "errors", "spread"];
  const align = ["---", "---", "--:", "--:", "--:", "--:", "--:", ...extras.map(() => "--:"), "--:", "--:"];
  const rows = results.map((r) => {
    if (r.status === "failed") {
      return [r.name, r.group, "**failed**", "", "", "", "", ...extras.map(() => ""), "", ""];
    }
    return [
      r.baseline ? `**${r.name}** (baseline)` : r.name,
      r.group,
      formatInt(r.rps),
      formatNum(r.p50Ms),
      formatNum(r.p99Ms),
      Number.isFinite(r.ratio) ? r.ratio.toFixed(2) : "—",
      formatNum(r.cpuUsPerOp),
      ...extras.map((k) => formatNum(r.extras[k])),
      r.errors ? formatInt(r.errors) : "0",
      `${(r.spread * 100).toFixed(1)} %`,
    ];
  });
  return [head, align, ...rows].map((cells) => `| ${cells.join(" | ")} |`).join("\n");
}

/** "9, 11, 15": the issues the figures answer, in order. */
const issuesOf = (figures: readonly Figure[]): string =>
  [...new Set(figures.map((f) => f.issue))].sort((a, b) => a - b).join(", ");

export function markdownReport(
  results: readonly ScenarioResult[],
  info: RunInfo,
  figures: readonly Figure[] = [],
): string {
  const o = info.options;
  const lines = [
    "# CityHub Edge — bench results",
    "",
    `Date: ${info.date}  `,
    `Command: \`${info.command}\`  `,
    `Run time: ${info.elapsedS.toFixed(0)} s`,
    "",
    ...(figures.length
      ? [
          `## Issue figures (${issuesOf(figures)})`,
          "",
          "Read from the rows below (scripts/bench/figures.ts); every ratio is against a row measured in the same rounds.",
          "",
          figuresMarkdown(figures),
          "",
          "## All rows",
          "",
        ]
      : []),
    markdownTable(results),
    "",
    ...results
      .filter((r) => r.status === "failed")
      .flatMap((r) => [`**${r.name} failed:**`, "", "```", r.error ?? "", "```", ""]),
    "## How to read this",
    "",
    `- Each scenario was warmed up for ${o.warmupMs / 1000} s, then measured in ${o.rounds} rounds of ${o.durationMs / 1000} s, ` +
      "interleaved with the other scenarios of its group (the order reverses every round).",
    `- HTTP scenarios: wrk -t${o.threads} -c${o.connections} --latency against a server in its own process (bun, deno or workerd). ` +
      `Other scenarios: ${o.connections} concurrent closed loops in the runner's process.`,
    "- **rps** is the median over rounds; **p50/p99** come from the median round (by rps).",
    "- **ratio** is the median over rounds of rps ÷ the group baseline's rps *in the same round*: the machine is " +
      "shared and noisy, so compare ratios, not absolute numbers across runs.",
    "- **spread** is (max − min) ÷ median of the rounds' rps; above ~10 % treat the row with suspicion.",
    "- **CPU µs/op** is the CPU time (user + system) of the runner and its child processes (servers, redis-server, " +
      "stand-ins; not wrk) per op, median over rounds. It moves much less than rps when other jobs load the machine, " +
      "so it is the better number for comparing runs made at different times.",
    "",
    "## Scenarios",
    "",
    ...results.map((r) => `- \`${r.name}\` (${r.group}${r.baseline ? ", baseline" : ""}): ${r.description}`),
    "",
    "## Machine",
    "",
    ...Object.entries(info.machine).map(([k, v]) => `- ${k}: ${v}`),
    "",
  ];
  return lines.join("\n");
}

export function jsonReport(results: readonly ScenarioResult[], info: RunInfo, figures: readonly Figure[] = []): string {
  return `${JSON.stringify({ ...info, figures, results }, null, 2)}\n`;
}

// ------------------------------------------------------------------------------------------ chart

const esc = (s: string): string =>
  s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

const W = 1440;
const LABEL_W = 300; // scenario names, right-aligned against the bars
const BAR_X = LABEL_W + 20;
const BAR_MAX = 580;
const RATIO_X = BAR_X + BAR_MAX + 170; // right-hand column: ratio, latencies, extras (~400 px)
const ROW_H = 68;
const BAR_H = 26;
/** Characters of 12 px detail text that fit between RATIO_X and the right edge; line spacing. */
const DETAIL_CHARS = 56;
const DETAIL_LINE_H = 15;

/** Joins items with " · " into lines of at most `max` characters (an over-long item gets a line of its own). */
function wrapItems(items: readonly string[], max: number): string[] {
  const lines: string[] = [];
  for (const item of items) {
    const last = lines[lines.length - 1];
    if (last !== undefined && last.length + 3 + item.length <= max) lines[lines.length - 1] = `${last} · ${item}`;
    else lines.push(item);
  }
  return lines;
}

/** A colour per row that reads at a glance: grey baseline, green faster, red slower, blue ~same. */
function barColour(r: ScenarioResult): string {
  if (r.baseline) return "#8a94a6";
  if (!Number.isFinite(r.ratio)) return "#5b7bd5";
  if (r.ratio >= 1.05) return "#2f9e44";
  if (r.ratio <= 0.95) return "#d9480f";
  return "#5b7bd5";
}

export function chartSvg(results: readonly ScenarioResult[], info: RunInfo, figures: readonly Figure[] = []): string {
  const groups = [...new Set(results.map((r) => r.group))];
  const o = info.options;
  const parts: string[] = [];
  let y = 40;
  parts.push(
    `<text x="${W / 2}" y="${y}" text-anchor="middle" class="title">CityHub Edge — throughput by scenario (higher is better)</text>`,
  );
  y += 26;
  parts.push(
    `<text x="${W / 2}" y="${y}" text-anchor="middle" class="sub">${esc(
      `${info.date.slice(0, 16).replace("T", " ")} UTC · ${info.machine.CPU ?? ""} · median of ${o.rounds} rounds × ${o.durationMs / 1000} s · ${o.connections} connections`,
    )}</text>`,
  );
  y += 20;
  parts.push(
    `<text x="${W / 2}" y="${y}" text-anchor="middle" class="sub">bars: median rps, scaled per group · ratio: median over rounds of rps ÷ the group baseline's rps in the same round</text>`,
  );
  y += 24;
  if (figures.length) {
    y += 12;
    parts.push(
      `<text x="20" y="${y}" class="group">issue ${esc(issuesOf(figures))} figures (green: target met, red: not met)</text>`,
    );
    y += 8;
    for (const f of figureLines(figures)) {
      y += 19;
      parts.push(
        `<text x="40" y="${y}" class="figure" fill="${f.met ? "#2b8a3e" : "#c92a2a"}">${esc(`${f.met ? "✓" : "✗"} ${f.text}`)}</text>`,
      );
    }
    y += 10;
  }

  for (const g of groups) {
    const rows = results.filter((r) => r.group === g);
    const max = Math.max(1, ...rows.filter((r) => r.status === "ok").map((r) => r.rps));
    const base = rows.find((r) => r.baseline);
    y += 16;
    parts.push(`<line x1="20" y1="${y}" x2="${W - 20}" y2="${y}" stroke="#ced4da"/>`);
    y += 26;
    parts.push(`<text x="20" y="${y}" class="group">group “${esc(g)}”</text>`);
    parts.push(`<text x="${RATIO_X}" y="${y}" class="colhead">ratio vs ${esc(base?.name ?? "baseline")}</text>`);
    y += 14;
    for (const r of rows) {
      const top = y + (ROW_H - BAR_H) / 2 - 4;
      const mid = top + BAR_H / 2 + 5;
      parts.push(`<text x="${LABEL_W}" y="${mid}" text-anchor="end" class="label">${esc(r.name)}</text>`);
      if (r.status === "failed") {
        parts.push(
          `<text x="${BAR_X}" y="${mid}" class="fail">failed: ${esc((r.error ?? "").split("\n")[0]!.slice(0, 90))}</text>`,
        );
        y += ROW_H;
        continue;
      }
      const w = Math.max(2, (r.rps / max) * BAR_MAX);
      parts.push(
        `<rect x="${BAR_X}" y="${top}" width="${w.toFixed(1)}" height="${BAR_H}" rx="3" fill="${barColour(r)}"/>`,
      );
      parts.push(`<text x="${BAR_X + w + 8}" y="${mid}" class="value">${formatInt(r.rps)} ops/s</text>`);
      const ratio = r.baseline ? "1.00 (baseline)" : Number.isFinite(r.ratio) ? `× ${r.ratio.toFixed(2)}` : "—";
      parts.push(
        `<text x="${RATIO_X}" y="${mid - 6}" class="ratio" fill="${r.baseline ? "#495057" : barColour(r)}">${esc(ratio)}</text>`,
      );
      const cpu = Number.isFinite(r.cpuUsPerOp) ? ` · CPU ${formatNum(r.cpuUsPerOp)} µs/op` : "";
      parts.push(
        `<text x="${RATIO_X}" y="${mid + 12}" class="detail">${esc(`p50 ${formatNum(r.p50Ms)} ms · p99 ${formatNum(r.p99Ms)} ms${cpu}`)}</text>`,
      );
      // Extras and errors get their own line so long column names are never clipped.
      const more = Object.entries(r.extras).map(([k, v]) => `${k} ${formatNum(v)}`);
      if (r.errors) more.push(`${formatInt(r.errors)} errors`);
      // Say so on the chart when the rounds disagreed: the bar alone would look precise.
      const noisy = r.spread > 0.1;
      if (noisy) more.push(`noisy: rps spread ${(r.spread * 100).toFixed(0)} %`);
      // Wrapped to the width of the right-hand column; each extra line makes the row taller.
      const lines = wrapItems(more, DETAIL_CHARS);
      lines.forEach((line, i) => {
        parts.push(
          `<text x="${RATIO_X}" y="${mid + 27 + i * DETAIL_LINE_H}" class="detail${r.errors || noisy ? " warn" : ""}">${esc(line)}</text>`,
        );
      });
      y += ROW_H + Math.max(0, lines.length - 1) * DETAIL_LINE_H;
    }
  }
  y += 20;
  parts.push(`<text x="20" y="${y}" class="foot">${esc(info.command)}</text>`);
  const H = y + 20;

  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}">
<style>
  text { font-family: 'DejaVu Sans', sans-serif; fill: #212529; }
  .title { font-size: 24px; font-weight: bold; }
  .sub { font-size: 14px; fill: #495057; }
  .group { font-size: 18px; font-weight: bold; }
  .colhead { font-size: 13px; fill: #6c757d; }
  .label { font-size: 15px; }
  .value { font-size: 14px; font-weight: bold; }
  .ratio { font-size: 17px; font-weight: bold; }
  .detail { font-size: 12px; fill: #495057; }
  .figure { font-size: 14px; }
  .fail { font-size: 14px; fill: #c92a2a; }
  .warn { fill: #c92a2a; }
  .foot { font-size: 12px; fill: #868e96; font-family: 'DejaVu Sans Mono', monospace; }
</style>
<rect width="100%" height="100%" fill="#ffffff"/>
${parts.join("\n")}
</svg>`;
}

/** resvg needs fonts for text; DejaVu is what Debian ships, fall back to whatever the system has. */
export function renderPng(svg: string): Buffer {
  const dejavu = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf",
    "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf",
  ].filter((f) => existsSync(f));
  const resvg = new Resvg(svg, {
    font: { loadSystemFonts: dejavu.length === 0, fontFiles: dejavu, defaultFontFamily: "DejaVu Sans" },
    fitTo: { mode: "width", value: W },
    background: "#ffffff",
  });
  return resvg.render().asPng();
}

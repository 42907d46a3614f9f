/**
 * No test sleeps longer than MAX_SLEEP_MS (issue 17 item 5): a wait for time to pass is a clock the
 * test moves (tests/support/clock.ts), a forced expiry (`expireNow`), or a poll on the condition
 * (`eventually`, `pollUntil`). Scans tests/ — except the stand-ins' own protocol tests
 * (tests/standins/, where a delay is the protocol under test) and this file — for sleeps whose
 * duration is known from the source: a literal, or an expression of literals and numeric
 * constants declared in the same file (`Bun.sleep(TTL_MS + 50)`). A duration computed at run
 * time (an arrival schedule, `Bun.sleep(wait)`) is not judged here.
 */
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { repoRoot } from "./build-worker.ts";

const MAX_SLEEP_MS = 50;
const TESTS = join(repoRoot, "tests");
const EXCLUDED = [join(TESTS, "standins"), join(TESTS, "support", "no-long-sleeps.test.ts")];

interface Sleep {
  line: number;
  call: string;
  ms: number;
}

/** Comments blanked out (line structure kept), so a commented-out sleep or prose about one is not judged. `://` in URLs is kept. */
function withoutComments(src: string): string {
  return src
    .replace(/\/\*[\s\S]*?\*\//g, (m) => m.replace(/[^\n]/g, " "))
    .replace(/(^|[^:\\"'`])\/\/[^\n]*/g, (_m, pre: string) => pre);
}

/** The arguments of the call whose "(" is at `open`, split at top-level commas; null when unbalanced. */
function argumentsAt(src: string, open: number): { args: string[]; end: number } | null {
  let depth = 0;
  let current = "";
  const args: string[] = [];
  for (let i = open; i < src.length; i++) {
    const ch = src[i] as string;
    if (ch === "(" || ch === "[" || ch === "{") depth++;
    if (ch === ")" || ch === "]" || ch === "}") depth--;
    if (depth === 0) {
      args.push(current.trim());
      return { args, end: i + 1 };
    }
    if (ch === "," && depth === 1) {
      args.push(current.trim());
      current = "";
    } else if (i > open) current += ch;
  }
  return null;
}

/** `const|let NAME = <numeric expression>` declarations of the file (the largest value when a name is declared twice). */
function numericConstants(src: string): Map<string, number> {
  const out = new Map<string, number>();
  for (let pass = 0; pass < 3; pass++) {
    for (const m of src.matchAll(/\b(?:const|let)\s+([A-Za-z_$][\w$]*)\s*(?::\s*number\s*)?=\s*([^;\n]+)/g)) {
      const value = evaluate(m[2] as string, out);
      if (value !== undefined)
        out.set(m[1] as string, Math.max(value, out.get(m[1] as string) ?? Number.NEGATIVE_INFINITY));
    }
  }
  return out;
}

/** The value of an arithmetic expression of numbers and known constants, or undefined when it has anything else. */
function evaluate(expr: string, constants: Map<string, number>): number | undefined {
  let unknown = false;
  const substituted = expr
    .trim()
    .replace(/(\d)_(?=\d)/g, "$1")
    .replace(/\bas\s+const\b/g, "")
    .replace(/\b[A-Za-z_$][\w$]*/g, (name) => {
      const v = constants.get(name);
      if (v === undefined) unknown = true;
      return String(v);
    });
  if (unknown || !/^[\d.\s+\-*/()]+$/.test(substituted) || !/\d/.test(substituted)) return undefined;
  try {
    const v = Function(`"use strict"; return (${substituted});`)() as unknown;
    return typeof v === "number" && Number.isFinite(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Sleeps in `source` whose duration is known and above `maxMs`: `Bun.sleep(ms)`, `Bun.sleepSync(ms)`,
 * a promise resolved by a timer (`setTimeout(resolve, ms)`, `setTimeout(() => resolve(), ms)`),
 * node:timers/promises' `setTimeout(ms)` and `scheduler.wait(ms)`. A timer whose callback does
 * something else (`setTimeout(() => ctl.abort(), 5000)`) is a deadline, not a sleep.
 */
function longSleeps(source: string, maxMs = MAX_SLEEP_MS): Sleep[] {
  const src = withoutComments(source);
  const constants = numericConstants(src);
  const lineOf = (index: number) => src.slice(0, index).split("\n").length;
  const found: Sleep[] = [];
  for (const m of src.matchAll(/\b(Bun\.sleep(?:Sync)?|setTimeout|scheduler\.wait)\s*\(/g)) {
    const open = (m.index as number) + m[0].length - 1;
    const call = argumentsAt(src, open);
    if (!call) continue;
    const { args } = call;
    let duration: string | undefined;
    if (m[1] === "setTimeout") {
      if (args.length === 1) duration = args[0];
      else if (
        /^[A-Za-z_$][\w$]*$/.test(args[0] as string) ||
        /^\(\s*\)\s*=>\s*[A-Za-z_$][\w$]*\(\s*\)$/.test(args[0] as string)
      )
        duration = args[1];
    } else duration = args[0];
    if (duration === undefined) continue;
    const ms = evaluate(duration, constants);
    if (ms !== undefined && ms > maxMs)
      found.push({ line: lineOf(m.index as number), call: `${m[1]}(${args.join(", ")})`, ms });
  }
  return found;
}

function testFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (EXCLUDED.some((x) => path === x || path.startsWith(`${x}/`))) continue;
    if (entry.isDirectory()) out.push(...testFiles(path));
    else if (/\.(ts|tsx|mts|js|mjs)$/.test(entry.name)) out.push(path);
  }
  return out;
}

describe(`no test sleeps longer than ${MAX_SLEEP_MS} ms (outside tests/standins)`, () => {
  test("the scanner finds literal and constant sleeps, and leaves deadlines, short sleeps, run-time durations and comments alone", () => {
    const source = [
      "const TTL_MS = 300;",
      "await Bun.sleep(100);",
      "await new Promise((r) => setTimeout(r, 1_100));",
      "await Bun.sleep(TTL_MS + 50);",
      "await Bun.sleep(20);",
      "const timer = setTimeout(() => ctl.abort(), 5000);",
      "await Bun.sleep(wait);",
      "// await Bun.sleep(999)",
      "await new Promise<void>((resolve) => setTimeout(() => resolve(), 2 * 60));",
      "await setTimeout(75); Bun.sleepSync(51); await scheduler.wait(1000); const url = 'http://x/'; await Bun.sleep(50);",
    ].join("\n");
    expect(longSleeps(source)).toEqual([
      { line: 2, call: "Bun.sleep(100)", ms: 100 },
      { line: 3, call: "setTimeout(r, 1_100)", ms: 1100 },
      { line: 4, call: "Bun.sleep(TTL_MS + 50)", ms: 350 },
      { line: 9, call: "setTimeout(() => resolve(), 2 * 60)", ms: 120 },
      { line: 10, call: "setTimeout(75)", ms: 75 },
      { line: 10, call: "Bun.sleepSync(51)", ms: 51 },
      { line: 10, call: "scheduler.wait(1000)", ms: 1000 },
    ]);
  });

  test("tests/ has none", () => {
    const files = testFiles(TESTS);
    // The scan reaches the suite (a wrong root would find nothing and pass).
    expect(files.length).toBeGreaterThan(50);
    const found = files.flatMap((file) =>
      longSleeps(readFileSync(file, "utf8")).map(
        (s) => `${relative(repoRoot, file)}:${s.line}  ${s.call} = ${s.ms} ms`,
      ),
    );
    expect(found).toEqual([]);
  });
});

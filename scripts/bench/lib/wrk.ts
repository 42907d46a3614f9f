/**
 * Runs wrk (a C load generator, its own process) against an HTTP target and parses its report.
 *
 * wrk rather than an in-process generator: a JS load generator would compete with the server for
 * the same runtime and tops out well below what Bun.serve can answer (see docs/development.md "Toolchain").
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { HttpTarget, Measurement } from "../types.ts";
import { assertLoopback } from "./util.ts";

export interface WrkOptions {
  durationMs: number;
  connections: number;
  threads: number;
  /** Where a generated request script may be written. */
  tmpDir: string;
}

let scriptCounter = 0;

/** wrk needs a Lua script for a method or body; headers alone could go through -H, but one path is simpler. */
function requestScript(target: HttpTarget, tmpDir: string): string | undefined {
  if (target.luaScript) return target.luaScript;
  if (!target.method && !target.body && !target.headers) return undefined;
  const lines: string[] = [];
  if (target.method) lines.push(`wrk.method = ${luaString(target.method)}`);
  if (target.body !== undefined) lines.push(`wrk.body = ${luaString(target.body)}`);
  for (const [k, v] of Object.entries(target.headers ?? {}))
    lines.push(`wrk.headers[${luaString(k)}] = ${luaString(v)}`);
  const path = join(tmpDir, `wrk-request-${++scriptCounter}.lua`);
  writeFileSync(path, `${lines.join("\n")}\n`);
  return path;
}

/** A Lua long-bracket-free string literal: escape backslash, quote and control characters. */
function luaString(s: string): string {
  return `"${s.replace(/[\\"]/g, (c) => `\\${c}`).replace(/[\x00-\x1f]/g, (c) => `\\${c.charCodeAt(0)}`)}"`;
}

/** Converts wrk's formatted time ("512.33us", "1.20ms", "2.00s", "1.00m") to milliseconds. */
export function parseWrkTime(text: string): number {
  const m = /^([\d.]+)(us|ms|s|m|h)$/.exec(text.trim());
  if (!m) throw new Error(`cannot parse wrk time "${text}"`);
  const n = Number(m[1]);
  const unit = m[2];
  const factor = unit === "us" ? 1e-3 : unit === "ms" ? 1 : unit === "s" ? 1e3 : unit === "m" ? 6e4 : 3.6e6;
  return n * factor;
}

/** Parses the output of `wrk --latency`. Exported for unit testing against canned output. */
export function parseWrkOutput(out: string): Measurement {
  const percentile = (p: string): number => {
    const m = new RegExp(`^\\s*${p}%\\s+(\\S+)\\s*$`, "m").exec(out);
    if (!m?.[1]) throw new Error(`wrk output has no ${p}% latency (was --latency passed?)\n${out}`);
    return parseWrkTime(m[1]);
  };
  const rps = /^Requests\/sec:\s+([\d.]+)/m.exec(out);
  const total = /^\s*(\d+) requests in ([\d.]+\w+)/m.exec(out);
  if (!rps?.[1] || !total?.[1] || !total[2]) throw new Error(`cannot parse wrk output:\n${out}`);
  let errors = 0;
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  if (sock) errors += Number(sock[1]) + Number(sock[2]) + Number(sock[3]) + Number(sock[4]);
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(out);
  if (non2xx) errors += Number(non2xx[1]);
  return {
    requests: Number(total[1]),
    errors,
    durationS: parseWrkTime(total[2]) / 1000,
    rps: Number(rps[1]),
    p50Ms: percentile("50"),
    p99Ms: percentile("99"),
  };
}

/** One wrk run. Killed if it overruns its duration by 15 s, so a stuck server cannot hang the bench. */
export async function runWrk(target: HttpTarget, opts: WrkOptions): Promise<Measurement> {
  assertLoopback(target.url);
  const seconds = Math.max(1, Math.round(opts.durationMs / 1000));
  const args = [`-t${opts.threads}`, `-c${target.connections ?? opts.connections}`, `-d${seconds}s`, "--latency"];
  const script = requestScript(target, opts.tmpDir);
  if (script) args.push("-s", script);
  args.push(target.url);
  if (target.luaScript && target.luaArgs?.length) args.push("--", ...target.luaArgs);
  return parseWrkOutput(await execWrk(args, seconds));
}

/**
 * Runs `wrk <args>` (for scenarios that drive wrk themselves, e.g. with script arguments after
 * `--` or their own connection count) and returns its stdout. `seconds` is the -d value: the
 * process is killed 15 s after it should have ended. The caller checks that the URL is loopback.
 */
export async function execWrk(args: readonly string[], seconds: number, stop?: AbortSignal): Promise<string> {
  const proc = Bun.spawn(["wrk", ...args], { stdout: "pipe", stderr: "pipe" });
  const killer = setTimeout(() => proc.kill("SIGKILL"), seconds * 1000 + 15_000);
  // wrk's main thread sleeps out -d whatever its threads do; SIGINT ends the sleep early, and wrk
  // then stops its threads and prints its report as usual.
  const onStop = () => proc.kill("SIGINT");
  if (stop?.aborted) onStop();
  else stop?.addEventListener("abort", onStop, { once: true });
  try {
    const [out, err, code] = await Promise.all([
      new Response(proc.stdout).text(),
      new Response(proc.stderr).text(),
      proc.exited,
    ]);
    if (code !== 0) throw new Error(`wrk exited with ${code}: ${err || out}`);
    return out;
  } finally {
    clearTimeout(killer);
    stop?.removeEventListener("abort", onStop);
  }
}

/**
 * CPU time spent by the system under test during a window, from /proc (Linux).
 *
 * Why: on a shared 2-core box throughput swings by tens of percent when other jobs run, but the
 * CPU time a server spends per request changes far less (it is mostly the same instructions, just
 * scheduled later). "CPU µs/op" is therefore the steadier number to compare across runs.
 *
 * What counts: the runner process and every process descended from it that exists when the
 * window starts — servers, redis-server, stand-ins. wrk is spawned after the snapshot, so the
 * load generator's own CPU is excluded; in-process drivers (closed loops) are included, as the
 * client library's cost is part of what those scenarios measure.
 */
import { readFileSync, readdirSync } from "node:fs";

/** utime + stime in clock ticks; USER_HZ is 100 on every Linux this runs on. */
const TICK_MS = 10;

function readTicks(pid: number): { ppid: number; ticks: number } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may contain spaces and parentheses: parse after the last ')'.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // rest[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
    const ppid = Number(rest[1]);
    const ticks = Number(rest[11]) + Number(rest[12]);
    return Number.isFinite(ticks) ? { ppid, ticks } : null;
  } catch {
    return null; // exited meanwhile, or not Linux
  }
}

export interface CpuSnapshot {
  ticks: Map<number, number>;
  /** `uncountedMs` when the snapshot was taken. */
  uncountedMs: number;
}

/** CPU ms spent inside `uncountedCpu` sections so far; subtracted by `cpuMsSince`. */
let uncountedMs = 0;

/**
 * Runs `fn` and keeps the CPU it costs out of every window measured around it: for work a `run`
 * target must do inside its window but that is not the measured operation (waiting for an
 * asynchronous writer to drain so the round can be verified, say). Measured like a window — the
 * runner and its descendants, in ticks of 10 ms — so only use it for sections of ~100 ms or more.
 */
export async function uncountedCpu<T>(fn: () => Promise<T>): Promise<T> {
  const before = cpuSnapshot();
  try {
    return await fn();
  } finally {
    if (before) uncountedMs += cpuMsSince(before);
  }
}

/** Snapshot of the runner and its descendants, or null where /proc is unavailable. */
export function cpuSnapshot(root: number = process.pid): CpuSnapshot | null {
  let pids: number[];
  try {
    pids = readdirSync("/proc")
      .filter((d) => /^\d+$/.test(d))
      .map(Number);
  } catch {
    return null;
  }
  const info = new Map<number, { ppid: number; ticks: number }>();
  for (const pid of pids) {
    const t = readTicks(pid);
    if (t) info.set(pid, t);
  }
  if (!info.has(root)) return null;
  // Breadth-first walk down from the runner; bounded by the number of processes on the box.
  const children = new Map<number, number[]>();
  for (const [pid, t] of info) children.set(t.ppid, [...(children.get(t.ppid) ?? []), pid]);
  const ticks = new Map<number, number>();
  const queue = [root];
  while (queue.length > 0 && ticks.size < info.size) {
    const pid = queue.shift()!;
    ticks.set(pid, info.get(pid)!.ticks);
    for (const c of children.get(pid) ?? []) if (!ticks.has(c)) queue.push(c);
  }
  return { ticks, uncountedMs };
}

/** CPU milliseconds used since `before` by the processes it saw (exited ones count as 0). */
export function cpuMsSince(before: CpuSnapshot): number {
  let total = 0;
  for (const [pid, t0] of before.ticks) {
    const now = readTicks(pid);
    if (now) total += Math.max(0, now.ticks - t0);
  }
  return Math.max(0, total * TICK_MS - (uncountedMs - before.uncountedMs));
}

/** Every process's CPU ticks now, and which of them are the runner and its descendants. */
export interface BoxSnapshot {
  ticks: Map<number, number>;
  /** /proc/stat's first line: busy and total jiffies of the whole box (all cores). */
  busy: number;
  total: number;
}

function procStat(): { busy: number; total: number } | null {
  try {
    const line = readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "";
    const f = line.trim().split(/\s+/).slice(1).map(Number);
    const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
    // idle + iowait are not busy.
    return { busy: total - (f[3] ?? 0) - (f[4] ?? 0), total };
  } catch {
    return null;
  }
}

/** Snapshot of the whole box (every process, /proc/stat), or null where /proc is unavailable. */
export function boxSnapshot(): BoxSnapshot | null {
  const stat = procStat();
  if (!stat) return null;
  const ticks = new Map<number, number>();
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    const t = readTicks(Number(d));
    if (t) ticks.set(Number(d), t.ticks);
  }
  return { ticks, ...stat };
}

/**
 * Since `before`: the box's busy share (0..1 of all cores) and the CPU ms of processes that are
 * not the runner or its descendants (other jobs on the shared box; processes that started and
 * exited in between are missed). For telling "the box was busy with something else" from "the
 * system under test ran out of CPU" when a round misses a target.
 */
export function boxSince(
  before: BoxSnapshot,
  root: number = process.pid,
): { busyShare: number; othersMs: number } | null {
  const now = boxSnapshot();
  const tree = cpuSnapshot(root);
  if (!now || !tree) return null;
  let othersTicks = 0;
  for (const [pid, t] of now.ticks) {
    if (tree.ticks.has(pid)) continue;
    othersTicks += Math.max(0, t - (before.ticks.get(pid) ?? 0));
  }
  const dt = now.total - before.total;
  return { busyShare: dt > 0 ? (now.busy - before.busy) / dt : Number.NaN, othersMs: othersTicks * TICK_MS };
}

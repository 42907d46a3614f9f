/**
 * Servers under test that are not `bun <script>` children (lib/proc.ts covers those): any command
 * — `deno run …`, or a bun script that starts workerd (servers/workerd-serve.ts) — started in a
 * process group of its own, so that stopping it (SIGTERM, then SIGKILL after a few seconds) also
 * ends what it started (workerd under miniflare) and nothing outlives the runner.
 *
 * The child's stdout and stderr are read line by line: lines are kept (tail) for error messages,
 * and error lines are counted by kind — a JSON log line of level "error" as `error: <msg>` (the
 * app's logger, src/log.ts), any other line on stderr as `stderr: <its start>` (workerd's own
 * complaints: canceled or hung requests, uncaught exceptions; Deno's panics); of workerd
 * --verbose's "info:" lines only uncaught exceptions count (`workerd: <exception>`), not a client's
 * hang-up, and not the "stack:" line that follows each. `errorLines()` is
 * cumulative: a round takes a snapshot before and the difference after (`diffCounts`).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { freePort } from "../../stack/engines.ts";
import { answers, sleep } from "./util.ts";

const groups = new Set<number>();
let hookInstalled = false;

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    /* already gone */
  }
}

function installExitHook(): void {
  if (hookInstalled) return;
  hookInstalled = true;
  process.on("exit", () => {
    for (const pid of groups) killGroup(pid, "SIGKILL");
  });
}

export interface ServerChild {
  proc: ChildProcess;
  port: number;
  url: string;
  /** The last lines the child printed (stdout and stderr), for error messages. */
  output(): string;
  /** Error lines by kind since start (see the module comment). */
  errorLines(): Record<string, number>;
  /** A few of the latest error lines, verbatim (truncated). */
  lastErrorLines(): string[];
  stop(): Promise<void>;
}

export interface SpawnServerOptions {
  /** What the log calls it. */
  name: string;
  /** argv; cmd[0] is resolved through PATH unless absolute. */
  cmd: string[];
  cwd?: string;
  /** The child's whole environment (nothing of the runner's is added: PORT must be in it). */
  env: Record<string, string>;
  /** The port the child will listen on (from `freePort()`); its URL is http://127.0.0.1:port. */
  port: number;
  /** Path polled until it answers (any status < 500). Default "/". */
  readyPath?: string;
  readyTimeoutMs?: number;
}

export { freePort };

/**
 * workerd --verbose's lines ("workerd/jsg/setup.c++:625: info: CODE_MOVED …", each exception
 * followed by a "stack: …" line of addresses). Only "uncaught exception" ones count, and not those
 * of a client that hung up (wrk closes its connections when a window ends).
 */
const WORKERD_INFO = /^workerd\/\S+: info: (.*)$/;
const CLIENT_GONE = /disconnected|Broken pipe|Connection reset|ECONNRESET|peer closed/i;

/** JSON lines of the app's logger at level error (src/log.ts writes `"level":"error"` right after `time`). */
const JSON_ERROR = /^\{.*"level":"error","msg":"((?:[^"\\]|\\.)*)"/;

export async function spawnServer(opts: SpawnServerOptions): Promise<ServerChild> {
  installExitHook();
  const proc = spawn(opts.cmd[0]!, opts.cmd.slice(1), {
    cwd: opts.cwd,
    env: opts.env,
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  const pid = proc.pid;
  if (pid === undefined) throw new Error(`${opts.name}: could not start ${opts.cmd.join(" ")}`);
  groups.add(pid);
  let exitCode: number | null = null;
  let exitSignal: NodeJS.Signals | null = null;
  const exited = new Promise<void>((resolve) =>
    proc.once("exit", (code, signal) => {
      exitCode = code;
      exitSignal = signal;
      resolve();
    }),
  );

  let tail: string[] = [];
  const counts = new Map<string, number>();
  let lastErrors: string[] = [];
  const onLine = (line: string, fromStderr: boolean) => {
    if (line.trim() === "") return;
    tail.push(line.length > 2000 ? `${line.slice(0, 2000)}…` : line);
    if (tail.length > 200) tail = tail.slice(-100);
    const m = JSON_ERROR.exec(line);
    let kind: string | null = null;
    if (m) kind = `error: ${m[1]}`;
    else if (fromStderr && !line.startsWith("{") && !line.startsWith("stack: ")) {
      const info = WORKERD_INFO.exec(line);
      if (!info) kind = `stderr: ${line.trim().slice(0, 100)}`;
      else if (info[1]?.startsWith("uncaught exception") && !CLIENT_GONE.test(info[1]))
        kind = `workerd: ${info[1].replace(/^uncaught exception; exception = /, "").slice(0, 100)}`;
    }
    if (kind === null) return;
    counts.set(kind, (counts.get(kind) ?? 0) + 1);
    lastErrors.push(line.slice(0, 600));
    if (lastErrors.length > 10) lastErrors = lastErrors.slice(-5);
  };
  const reader = (fromStderr: boolean) => {
    let partial = "";
    return (chunk: Buffer) => {
      const text = partial + chunk.toString("utf8");
      const lines = text.split("\n");
      partial = lines.pop() ?? "";
      // A line without an end for 64 KiB is cut there, so a runaway child cannot grow `partial`.
      if (partial.length > 65_536) {
        lines.push(partial);
        partial = "";
      }
      for (const l of lines) onLine(l, fromStderr);
    };
  };
  proc.stdout?.on("data", reader(false));
  proc.stderr?.on("data", reader(true));

  const stop = async (): Promise<void> => {
    if (exitCode === null && exitSignal === null) {
      killGroup(pid, "SIGTERM");
      const done = await Promise.race([exited.then(() => true), sleep(5000).then(() => false)]);
      if (!done) {
        killGroup(pid, "SIGKILL");
        await Promise.race([exited, sleep(2000)]);
      }
    }
    // The leader may be gone while members (workerd) linger: one more SIGKILL to the group is harmless.
    killGroup(pid, "SIGKILL");
    groups.delete(pid);
  };

  const url = `http://127.0.0.1:${opts.port}`;
  const lastLines = () => tail.slice(-20).join("\n").slice(-4000);
  const deadline = Date.now() + (opts.readyTimeoutMs ?? 20_000);
  for (;;) {
    if (exitCode !== null || exitSignal !== null) {
      groups.delete(pid);
      throw new Error(`${opts.name} exited (${exitCode ?? exitSignal}) before it was ready:\n${lastLines()}`);
    }
    if (await answers(url + (opts.readyPath ?? "/"))) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`${opts.name} did not answer on ${url} in time:\n${lastLines()}`);
    }
    await sleep(50);
  }
  return {
    proc,
    port: opts.port,
    url,
    output: () => tail.join("\n"),
    errorLines: () => Object.fromEntries(counts),
    lastErrorLines: () => [...lastErrors],
    stop,
  };
}

/** b − a per key (cumulative counters), keys with a positive difference only. */
export function diffCounts(a: Record<string, number>, b: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(b)) if (v - (a[k] ?? 0) > 0) out[k] = v - (a[k] ?? 0);
  return out;
}

export const sumCounts = (r: Record<string, number>): number => Object.values(r).reduce((a, b) => a + b, 0);

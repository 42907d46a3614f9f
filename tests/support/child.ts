/**
 * Child processes a test can kill -9 and restart on the same port (chaos tests), plus the small
 * timing helpers such tests need: `within` (every await gets a deadline) and `pollUntil`
 * (readiness and settled states are polled for, never slept for).
 *
 * Output of every start of a child is appended to one log file, so a test can read what the
 * process said across all of its lives. Children still running when the test process exits
 * (a crash, a timeout) are SIGKILLed by an exit hook, like the engines in scripts/stack/engines.ts.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, closeSync, openSync, readdirSync, readFileSync } from "node:fs";
import { connect } from "node:net";
import { killOnExit } from "../../scripts/stack/engines.ts";

/** Resolves `p`, or rejects after `ms` with a message naming `what` (the work itself is not cancelled). */
export async function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Calls `check` every `everyMs` until it returns a value other than `undefined`/`false`, and
 * returns it; throws after `timeoutMs` with `what` and the last error `check` threw, if any.
 */
export async function pollUntil<T>(
  what: string,
  check: () => Promise<T | undefined | false>,
  timeoutMs: number,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      const v = await within(Math.max(1, deadline - Date.now()), what, check());
      if (v !== undefined && v !== false) return v;
    } catch (e) {
      lastError = e;
    }
    if (Date.now() >= deadline) {
      const why = lastError instanceof Error ? ` (last error: ${lastError.message})` : "";
      throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}${why}`);
    }
    await Bun.sleep(everyMs);
  }
}

/** Whether something accepts TCP connections on 127.0.0.1:`port` (answers within 1 s). */
export async function tcpOpen(port: number): Promise<boolean> {
  return await new Promise<boolean>((resolve) => {
    const s = connect(port, "127.0.0.1");
    const done = (ok: boolean) => {
      clearTimeout(timer);
      s.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), 1000);
    s.once("connect", () => done(true));
    s.once("error", () => done(false));
  });
}

/** Whether a process with this pid still exists (signal 0 probes without signalling). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

export interface ManagedChildOptions {
  name: string;
  command: string;
  args: string[];
  cwd: string;
  /** The complete environment of the child (nothing is inherited implicitly). */
  env: Record<string, string>;
  /** stdout and stderr of every start are appended here. */
  logFile: string;
  /** Resolves true once the child serves; polled after every start. */
  ready: () => Promise<boolean>;
  readyTimeoutMs?: number;
}

/** One service run as a child process: start, kill -9, stop, restart with the same command line. */
export class ManagedChild {
  private child: ChildProcess | undefined;
  /** Completed starts (the first one included). */
  starts = 0;
  /** SIGKILLs sent. */
  kills = 0;

  constructor(private readonly opts: ManagedChildOptions) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get alive(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Spawns the child and waits until `ready()`; fails if it exits first or is not ready in time. */
  async start(): Promise<void> {
    if (this.alive) throw new Error(`${this.opts.name} is already running`);
    appendFileSync(
      this.opts.logFile,
      `--- ${new Date().toISOString()} start #${this.starts + 1} of ${this.opts.name}\n`,
    );
    const fd = openSync(this.opts.logFile, "a");
    let child: ChildProcess;
    try {
      child = spawn(this.opts.command, this.opts.args, {
        cwd: this.opts.cwd,
        env: this.opts.env,
        stdio: ["ignore", fd, fd],
      });
    } finally {
      closeSync(fd); // the child holds its own copy
    }
    this.child = child;
    child.once("exit", killOnExit(child));
    // Either of these ends the wait at once instead of at the readiness deadline.
    const failed = new Promise<never>((_, reject) => {
      child.once("error", (e) => reject(new Error(`${this.opts.name}: ${e.message}`)));
      child.once("exit", (code, signal) =>
        reject(new Error(`${this.opts.name} exited (${code ?? signal}) before it was ready; see ${this.opts.logFile}`)),
      );
    });
    failed.catch(() => {}); // after readiness, a later exit is the test's business, not a rejection
    await Promise.race([
      failed,
      pollUntil(`${this.opts.name} ready`, () => this.opts.ready(), this.opts.readyTimeoutMs ?? 20_000, 25),
    ]);
    this.starts++;
  }

  /** kill -9, then waits until the process is gone. */
  async kill9(): Promise<void> {
    const child = this.child;
    if (!child || !this.alive) return;
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    child.kill("SIGKILL");
    this.kills++;
    appendFileSync(this.opts.logFile, `--- ${new Date().toISOString()} SIGKILL sent to ${this.opts.name}\n`);
    await within(10_000, `${this.opts.name} to exit after SIGKILL`, exited);
  }

  /** SIGTERM, SIGKILL after `graceMs`; never throws. */
  async stop(graceMs = 3000): Promise<void> {
    const child = this.child;
    if (!child || !this.alive) return;
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
    await within(graceMs + 5000, `${this.opts.name} to stop`, exited).catch(() => {});
    clearTimeout(timer);
  }
}

/** Whether `pid` runs: it exists and is not a zombie (Linux /proc). */
export function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat[stat.lastIndexOf(")") + 2] !== "Z";
  } catch {
    return false;
  }
}

/** Pids of `root`'s descendants (Linux /proc). */
export function descendants(root: number): number[] {
  const parentOf = new Map<number, number>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      parentOf.set(Number(name), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {
      /* gone meanwhile */
    }
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const [pid, ppid] of parentOf)
      if (ppid === p) {
        out.push(pid);
        walk(pid);
      }
  };
  walk(root);
  return out;
}

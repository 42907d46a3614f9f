/**
 * Child processes for scenarios: each server under test runs in its own `bun` process so it has a
 * JS thread of its own (the runner's thread drives wrk and in-process loops).
 */
import type { Subprocess } from "bun";
import { freePort } from "../../stack/engines.ts";
import { answers, sleep } from "./util.ts";

export { freePort };

const children = new Set<Subprocess>();
let hookInstalled = false;

/** Whatever happens to the runner (crash, Ctrl-C), no server it started may outlive it. */
function installExitHook(): void {
  if (hookInstalled) return;
  hookInstalled = true;
  process.on("exit", () => {
    for (const c of children) {
      try {
        c.kill("SIGKILL");
      } catch {
        /* already gone */
      }
    }
  });
}

export interface BunChild {
  proc: Subprocess;
  port: number;
  url: string;
  /** Lines the child printed, for error messages. */
  output(): string;
  stop(): Promise<void>;
}

export interface SpawnBunOptions {
  /** Script path, absolute. */
  script: string;
  env?: Record<string, string>;
  /** Path polled until it answers (any status < 500). */
  readyPath?: string;
  readyTimeoutMs?: number;
  /** Receives IPC messages from the child (process.send in the child). */
  ipc?: (message: unknown) => void;
}

/**
 * Starts `bun <script>` with PORT set to a free loopback port and waits until it answers HTTP.
 * The child must listen on 127.0.0.1:$PORT.
 */
export async function spawnBunServer(opts: SpawnBunOptions): Promise<BunChild> {
  installExitHook();
  const port = await freePort();
  let out = "";
  const keep = async (stream: ReadableStream<Uint8Array>) => {
    const dec = new TextDecoder();
    for await (const chunk of stream) {
      out += dec.decode(chunk);
      if (out.length > 20_000) out = out.slice(-10_000);
    }
  };
  const proc = Bun.spawn([process.execPath, opts.script], {
    env: { ...process.env, ...opts.env, PORT: String(port), HOST: "127.0.0.1" },
    stdout: "pipe",
    stderr: "pipe",
    ...(opts.ipc ? { ipc: (m: unknown) => opts.ipc?.(m) } : {}),
  });
  children.add(proc);
  void keep(proc.stdout as ReadableStream<Uint8Array>);
  void keep(proc.stderr as ReadableStream<Uint8Array>);

  const stop = async (): Promise<void> => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill("SIGTERM");
      // Bun takes up to ~1 s to exit on SIGTERM (docs/development.md "Toolchain"); do not wait longer than 3 s.
      const done = await Promise.race([proc.exited.then(() => true), sleep(3000).then(() => false)]);
      if (!done) {
        proc.kill("SIGKILL");
        await proc.exited;
      }
    }
    children.delete(proc);
  };

  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + (opts.readyTimeoutMs ?? 15_000);
  for (;;) {
    if (proc.exitCode !== null) {
      children.delete(proc);
      throw new Error(`${opts.script} exited with ${proc.exitCode} before it was ready:\n${out}`);
    }
    if (await answers(url + (opts.readyPath ?? "/"))) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`${opts.script} did not answer on ${url} in time:\n${out}`);
    }
    await sleep(25);
  }
  return { proc, port, url, output: () => out, stop };
}

/**
 * Deno smoke test: the real entry (`deno run src/entry/deno.ts`) as a child process, offline —
 * bare specifiers resolve from the existing node_modules (`--node-modules-dir=manual`), no remote
 * modules, no lockfile written — bound to the per-process test stack.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Subprocess } from "bun";
import { join } from "node:path";
import { freePort } from "../../scripts/stack/engines.ts";
import { repoRoot } from "../support/build-worker.ts";
import { within } from "../support/child.ts";
import { getStack } from "../support/stack.ts";

const deno = join(repoRoot, "node_modules/.bin/deno");
const READY_TIMEOUT_MS = 15_000;

let proc: Subprocess<"ignore", "pipe", "pipe"> | undefined;
let base = "";
const output: string[] = [];

function drain(stream: ReadableStream<Uint8Array>) {
  void (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) output.push(decoder.decode(chunk, { stream: true }));
  })().catch(() => {});
}

const recentOutput = () => `--- deno output ---\n${output.join("").slice(-4000)}`;

beforeAll(async () => {
  const stack = await getStack();
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  proc = Bun.spawn(
    [
      deno,
      "run",
      "-A",
      "--no-prompt",
      "--node-modules-dir=manual",
      "--no-remote",
      "--cached-only",
      "--no-lock",
      "src/entry/deno.ts",
    ],
    {
      cwd: repoRoot,
      env: {
        ...process.env,
        ...stack.env,
        PORT: String(port),
        HOST: "127.0.0.1",
        RUN_CRON: "false",
        LOG_LEVEL: "info",
        DENO_NO_UPDATE_CHECK: "1",
        NO_COLOR: "1",
      },
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
    },
  );
  drain(proc.stdout);
  drain(proc.stderr);

  // Ready when it answers HTTP; fail fast if the process exits first, bounded either way.
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null) {
      throw new Error(`deno exited early (code ${proc.exitCode}, signal ${proc.signalCode})\n${recentOutput()}`);
    }
    try {
      await fetch(`${base}/__ready`, { signal: AbortSignal.timeout(1000) });
      return;
    } catch {
      /* not listening yet */
    }
    if (Date.now() > deadline)
      throw new Error(`deno did not listen on ${base} within ${READY_TIMEOUT_MS} ms\n${recentOutput()}`);
    await Bun.sleep(50);
  }
}, READY_TIMEOUT_MS + 10_000);

afterAll(async () => {
  if (!proc) return;
  proc.kill("SIGTERM");
  const exited = await within(3000, "deno to exit on SIGTERM", proc.exited).then(
    () => true,
    () => false,
  );
  if (!exited) {
    proc.kill("SIGKILL");
    await proc.exited;
  }
}, 10_000);

describe("Deno entry (deno run src/entry/deno.ts)", () => {
  test("GET /health is 200 with Redis and MySQL green", async () => {
    const res = await fetch(`${base}/health`, { signal: AbortSignal.timeout(5000) });
    const body = (await res.json()) as { success: boolean; data: { ok: boolean; redis: string; mysql: string } };
    if (res.status !== 200) throw new Error(`health ${res.status}: ${JSON.stringify(body)}\n${recentOutput()}`);
    expect(body).toEqual({ success: true, data: { ok: true, redis: "up", mysql: "up" } });
    expect(res.headers.get("x-request-id")).toBeString();
    // Its dependency trips (src/util/trips.ts; AsyncLocalStorage from node:async_hooks on Deno).
    expect(res.headers.get("server-timing")).toMatch(/trips;desc="\d+ in sequence"/);
  }, 10_000);

  test("an unknown route is a 404 JSON envelope with code NOT_FOUND", async () => {
    const res = await fetch(`${base}/api/nope`, { signal: AbortSignal.timeout(5000) });
    expect(res.status).toBe(404);
    const rid = res.headers.get("x-request-id");
    expect(await res.json()).toEqual({
      success: false,
      code: "NOT_FOUND",
      errorMsg: "no route for GET /api/nope",
      requestId: rid as string,
    });
  }, 10_000);
});

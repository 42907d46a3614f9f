/**
 * Order ids on each runtime that runs the app as one process (Bun, Deno): a cold isolate whose
 * crowd outnumbers one id block (4,096) joins shared draws and still hands out only distinct ids
 * from blocks it drew (tests/runtimes/ids-crowd.ts, run under the runtime itself). workerd does
 * not share in-flight draws between requests (src/runtime.ts): each caller draws its own block,
 * covered in tests/seckill/ids.test.ts.
 */
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { repoRoot } from "../support/build-worker.ts";
import { within } from "../support/child.ts";
import { selectedRuntimes } from "../support/runtimes.ts";
import { getStack } from "../support/stack.ts";

const CROWD = 10_000;

function command(name: "bun" | "deno"): string[] {
  const script = join(repoRoot, "tests/runtimes/ids-crowd.ts");
  if (name === "bun") return [process.execPath, script];
  // Offline, as the matrix runs Deno: modules from node_modules, nothing remote, no lockfile.
  const deno = join(repoRoot, "node_modules/.bin/deno");
  return [
    deno,
    "run",
    "-A",
    "--no-prompt",
    "--node-modules-dir=manual",
    "--no-remote",
    "--cached-only",
    "--no-lock",
    script,
  ];
}

describe.each(selectedRuntimes().filter((n) => n !== "workerd") as ("bun" | "deno")[])("order ids on %s", (name) => {
  test(`a cold isolate's ${CROWD.toLocaleString("en")} concurrent callers, then another isolate's: all distinct`, async () => {
    const stack = await getStack();
    const proc = Bun.spawn(command(name), {
      cwd: repoRoot,
      env: { ...process.env, ...stack.env, CROWD: String(CROWD), DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [out, err, code] = await within(
      90_000,
      `${name} ids-crowd`,
      Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]),
    );
    if (code !== 0) throw new Error(`${name} exited ${code}\n${err.slice(-4000)}`);
    const r = JSON.parse(out.trim().split("\n").at(-1) ?? "{}");
    expect(r.runtime).toBe(name);
    expect(r.sharesIo).toBe(true);
    expect(r.ids).toBe(2 * CROWD);
    expect(r.distinct).toBe(2 * CROWD);
    // Every id lies in a block its isolate drew: none spilled into a block another isolate holds.
    expect(r.blocks[0]).toBeLessThanOrEqual(r.draws[0]);
    expect(r.blocks[1]).toBeLessThanOrEqual(r.draws[1]);
  }, 120_000);
});

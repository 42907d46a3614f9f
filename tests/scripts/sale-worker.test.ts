/**
 * `npm run worker`, then `npm run sale` with its defaults (5,000 buyers at 500 units, 200 in flight,
 * buyers spread over loopback addresses) against that Worker, as a user runs the two: the Worker
 * under `wrangler dev` with default settings (tests/support/wrangler-dev.ts), the sale simulator as
 * a process of its own reading the Worker's stack settings (`--stack-env DIR/stack.env`). It must
 * sell out and drain every order (exit 0). Also: the cron fires on its schedule under wrangler dev,
 * and SIGTERM stops everything `npm run worker` started. Logs of a failed run are kept.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoRoot } from "../../scripts/stack/workerd.ts";
import { descendants, pidAlive, pollUntil, running, tcpOpen, within } from "../support/child.ts";
import { startWranglerDev, type WranglerDev } from "../support/wrangler-dev.ts";

const SALE_TIMEOUT_MS = 150_000;

let dir = "";
let worker: WranglerDev | undefined;
let failed = false;

const guarded = (fn: () => Promise<void>) => async () => {
  try {
    await fn();
  } catch (err) {
    failed = true;
    if (err instanceof Error && worker)
      err.message += `\n--- worker log tail (${worker.logFile}) ---\n${worker.logTail()}`;
    throw err;
  }
};

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "cityhub-sale-worker-"));
  try {
    worker = await startWranglerDev({ dir });
  } catch (err) {
    failed = true;
    throw err;
  }
}, 180_000);

afterAll(async () => {
  await worker?.stop();
  if (failed) console.error(`sale against npm run worker: logs kept in ${dir}`);
  else if (dir) rmSync(dir, { recursive: true, force: true });
}, 60_000);

/** Runs `bun scripts/sale.ts args…` with only PATH and HOME from this process (not the preload stack's settings). */
async function runSale(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [join(repoRoot, "scripts/sale.ts"), ...args], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? dir, NO_COLOR: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (b: Buffer) => {
    stdout += b.toString();
  });
  child.stderr.on("data", (b: Buffer) => {
    stderr += b.toString();
  });
  try {
    const code = await within(
      SALE_TIMEOUT_MS,
      "npm run sale",
      new Promise<number | null>((resolve) => child.once("exit", (c) => resolve(c))),
    );
    return { code, stdout, stderr };
  } finally {
    if (child.exitCode === null) child.kill("SIGKILL");
  }
}

describe("npm run sale against npm run worker (wrangler dev, default settings)", () => {
  test(
    "with its defaults it sells out and drains every order (exit 0)",
    guarded(async () => {
      const w = worker as WranglerDev;
      const r = await runSale(["--stack-env", w.stackEnvFile, "--json"]);
      const summary = r.code === null ? undefined : (JSON.parse(r.stdout.trim().split("\n").at(-1) || "{}") as object);
      expect({ code: r.code, stderr: r.code === 0 ? "" : r.stderr.slice(-2000), summary }).toMatchObject({
        code: 0,
        stderr: "",
        summary: { sold: 500, drained: true, ordersInMysql: 500, outboxPending: 0 },
      });
    }),
    SALE_TIMEOUT_MS + 10_000,
  );

  test(
    "the cron of wrangler.toml fires on its schedule under wrangler dev: a `* * * * *` run is logged and ran",
    guarded(async () => {
      const w = worker as WranglerDev;
      await pollUntil(
        "a cron run logged by npm run worker",
        async () => /\[worker\] cron \* \* \* \* \* \([^)]+\): ran, 200/.test(w.logSince(0)),
        70_000,
        500,
      );
    }),
    80_000,
  );

  test(
    "SIGTERM stops everything it started: wrangler, workerd, redis-server, MariaDB and the stand-ins' ports",
    guarded(async () => {
      const w = worker as WranglerDev;
      const pid = w.pid as number;
      const pids = descendants(pid);
      const names = pids.map((p) => {
        try {
          return readFileSync(`/proc/${p}/comm`, "utf8").trim();
        } catch {
          return "";
        }
      });
      for (const bin of ["redis-server", "mariadbd", "workerd"]) expect(names).toContain(bin);
      const env = w.stackEnv;
      const ports = [
        w.port,
        Number(new URL(env.UPSTASH_REDIS_REST_URL as string).port),
        Number(new URL(env.QSTASH_URL as string).port),
        Number(new URL(env.LOCAL_REDIS_URL as string).port),
        Number(new URL(env.LOCAL_MYSQL_URL as string).port),
      ];
      await w.stop();
      expect(pidAlive(pid)).toBe(false);
      // Its children are re-parented and reaped once they exit: a zombie counts as gone.
      await pollUntil(
        "every process npm run worker started to exit",
        async () => pids.every((p) => !running(p)),
        15_000,
        100,
      );
      const open: number[] = [];
      for (const p of ports) if (await tcpOpen(p)) open.push(p);
      expect(open).toEqual([]);
    }),
    60_000,
  );
});

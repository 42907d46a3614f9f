/**
 * `bun dev` (scripts/dev.ts) stops everything it started — the app, redis-server, MariaDB and the
 * stand-ins' ports — whichever way it is stopped: Ctrl-C to its process group (with the runner
 * forwarding the interrupt once more, as `bun run` and npm do), or SIGINT, SIGTERM or SIGHUP to the
 * runner alone. A runner killed with -9 leaves its engines behind; the next start on the same data
 * directory stops them (one line naming the pid) instead of failing on MariaDB's locks.
 * All runs share one directory (MariaDB is initialised once) and use kernel-chosen ports.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { killOnExit } from "../../scripts/stack/engines.ts";
import { repoRoot } from "../../scripts/stack/workerd.ts";
import { descendants, pollUntil, running, tcpOpen } from "../support/child.ts";

const READY_MS = 120_000;
let dir = "";
let failed = false;
let runs = 0;
const groups: number[] = [];

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "cityhub-dev-stop-"));
});
afterAll(() => {
  // A failed test may leave a run behind: its whole group (engines included) goes.
  for (const g of groups)
    try {
      process.kill(-g, "SIGKILL");
    } catch {
      /* gone */
    }
  if (failed) console.error(`bun dev stop tests: logs kept in ${dir}`);
  else if (dir) rmSync(dir, { recursive: true, force: true });
});

function comm(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return "";
  }
}

interface Dev {
  /** The process group leader: `sh`, the runner's parent (as `bun run` / npm is). */
  group: ChildProcess;
  /** scripts/dev.ts itself. */
  runner: number;
  log: string;
  text(): string;
  /** Every process below the group leader (runner, app, engines). */
  pids: number[];
  ports: number[];
}

/** Starts `sh -c 'bun scripts/dev.ts --dir DIR …'` in a process group of its own; resolves once it is ready. */
async function startDev(): Promise<Dev> {
  const log = join(dir, `dev-${++runs}.log`);
  const fd = openSync(log, "a");
  let group: ChildProcess;
  try {
    group = spawn(
      "/bin/sh",
      [
        "-c",
        // `; exit $?` keeps the shell as the runner's parent (no exec), like a script runner.
        '"$0" "$@"; exit $?',
        process.execPath,
        join(repoRoot, "scripts/dev.ts"),
        "--dir",
        dir,
        "--free-ports",
        "--no-seed",
      ],
      {
        cwd: repoRoot,
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? dir, NO_COLOR: "1" },
        stdio: ["ignore", fd, fd],
        detached: true,
      },
    );
  } finally {
    closeSync(fd);
  }
  const leader = group.pid as number;
  groups.push(leader);
  const dropHook = killOnExit({ kill: (sig) => process.kill(-leader, sig) });
  group.once("exit", dropHook);
  const text = () => readFileSync(log, "utf8");
  const url = await pollUntil(
    "bun dev ready",
    async () => {
      if (group.exitCode !== null) throw new Error(`bun dev exited (${group.exitCode}):\n${text()}`);
      return /\[dev\] ready on (http:\/\/127\.0\.0\.1:\d+)/.exec(text())?.[1];
    },
    READY_MS,
    100,
  );
  // The shell's one child; the app below it is a `bun` too.
  const runner = readFileSync(`/proc/${leader}/task/${leader}/children`, "utf8")
    .trim()
    .split(/\s+/)
    .map(Number)[0] as number;
  const pids = descendants(leader);
  const env = Object.fromEntries(
    readFileSync(join(dir, "stack.env"), "utf8")
      .split("\n")
      .filter((l) => /^[A-Z_]+=/.test(l))
      .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1).replace(/^"|"$/g, "")]),
  );
  const ports = [url, env.UPSTASH_REDIS_REST_URL, env.QSTASH_URL, env.LOCAL_REDIS_URL, env.LOCAL_MYSQL_URL].map((u) =>
    Number(new URL(u as string).port),
  );
  return { group, runner, log, text, pids, ports };
}

/** Waits until every process `dev` started has exited and none of its ports answers. */
async function expectNothingLeft(dev: Dev): Promise<void> {
  await pollUntil("every process bun dev started to exit", async () => dev.pids.every((p) => !running(p)), 30_000, 100);
  const open: number[] = [];
  for (const p of dev.ports) if (await tcpOpen(p)) open.push(p);
  expect(open).toEqual([]);
}

const guarded = (fn: () => Promise<void>) => async () => {
  try {
    await fn();
  } catch (err) {
    failed = true;
    throw err;
  }
};

describe("bun dev stops everything it started", () => {
  test(
    "it runs the app, redis-server and MariaDB below the runner",
    guarded(async () => {
      const dev = await startDev();
      const names = dev.pids.map(comm);
      for (const bin of ["redis-server", "mariadbd"]) expect(names).toContain(bin);
      expect(names).toContain("bun"); // the app (the runner is bun.exe or bun)
      expect(dev.text()).toContain("/console");
      expect(dev.text()).toContain("/docs");
      process.kill(dev.runner, "SIGTERM");
      await expectNothingLeft(dev);
    }),
    READY_MS + 60_000,
  );

  test(
    "Ctrl-C to the process group (and the interrupt forwarded to the runner once more)",
    guarded(async () => {
      const dev = await startDev();
      process.kill(-(dev.group.pid as number), "SIGINT");
      process.kill(dev.runner, "SIGINT");
      await expectNothingLeft(dev);
      expect(dev.text()).not.toContain("left over");
    }),
    READY_MS + 60_000,
  );

  for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"] as const)
    test(
      `${sig} to the runner alone`,
      guarded(async () => {
        const dev = await startDev();
        process.kill(dev.runner, sig);
        await expectNothingLeft(dev);
        expect(dev.text()).toContain(`[dev] ${sig}: stopping`);
      }),
      READY_MS + 60_000,
    );

  test(
    "engines left by a runner killed with -9 are found through their pid files and stopped by the next start",
    guarded(async () => {
      const first = await startDev();
      const engines = first.pids.filter((p) => ["redis-server", "mariadbd"].includes(comm(p)));
      expect(engines.length).toBe(2);
      process.kill(first.runner, "SIGKILL");
      // The engines outlive it (re-parented); the app is tied to the runner and goes.
      await pollUntil("the runner to be gone", async () => !running(first.runner), 10_000, 50);
      expect(engines.every(running)).toBe(true);

      const second = await startDev();
      const notes = second
        .text()
        .split("\n")
        .filter((l) => l.includes("left over from an earlier run"));
      expect(notes.length).toBe(2);
      expect(notes.join("\n")).toContain("mariadbd (pid ");
      expect(notes.join("\n")).toContain("redis-server (pid ");
      expect(engines.filter(running)).toEqual([]);
      process.kill(second.runner, "SIGTERM");
      await expectNothingLeft(second);
      expect(first.pids.filter(running)).toEqual([]);
    }),
    2 * READY_MS + 60_000,
  );
});

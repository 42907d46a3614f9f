/**
 * Private instances of the real engines (redis-server, MariaDB) for the dev stack and the tests.
 *
 * Each instance gets its own port and data directory and is a child process of the caller, so
 * nothing outlives the stack: `stop()` terminates it, and the process-exit hook below kills any
 * instance that is still running when the parent exits (Ctrl-C, SIGTERM, a crashed test run).
 * A parent killed with -9 runs no hook: the next start on the same directory finds the leftover
 * engine through its pid file and stops it first (`stopLeftover`), with one line of output.
 */
import { spawn, type ChildProcess } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer, connect } from "node:net";
import { join } from "node:path";

export interface Engine {
  host: string;
  port: number;
  stop(): Promise<void>;
}

export interface MariaEngine extends Engine {
  socket: string;
  user: string;
  password: string;
}

const running = new Set<{ kill(signal: "SIGKILL"): unknown }>();
let exitHookInstalled = false;

/**
 * Kills `child` with SIGKILL if this process exits while it runs (Ctrl-C, SIGTERM, a crashed test
 * run); call the returned function once the child has exited on its own.
 */
export function killOnExit(child: { kill(signal: "SIGKILL"): unknown }): () => void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    // 'exit' handlers must be synchronous: SIGKILL is the only thing that cannot be ignored.
    process.on("exit", () => {
      for (const c of running) {
        try {
          c.kill("SIGKILL");
        } catch {
          /* already gone */
        }
      }
    });
  }
  running.add(child);
  return () => running.delete(child);
}

/** Asks the kernel for a free TCP port on loopback. */
export async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      if (addr === null || typeof addr === "string") return reject(new Error("no port"));
      srv.close(() => resolve(addr.port));
    });
  });
}

/** Resolves a server binary by name, also looking in sbin (Debian puts mariadbd there). */
export function findBinary(name: string): string | undefined {
  const dirs = (process.env.PATH ?? "").split(":").concat(["/usr/sbin", "/usr/local/sbin", "/sbin"]);
  for (const d of dirs) {
    const p = join(d, name);
    if (d && existsSync(p)) return p;
  }
  return undefined;
}

/** Whether `pid` runs (exists and is not a zombie; Linux /proc). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat[stat.lastIndexOf(")") + 2] !== "Z";
  } catch {
    return false;
  }
}

/** Whether process `pid` is the engine `name` working in `dir` (its cwd: both engines chdir to their data dir). */
function isEngineIn(pid: number, name: string, dir: string): boolean {
  try {
    return (
      alive(pid) &&
      readFileSync(`/proc/${pid}/comm`, "utf8").trim() === name &&
      readlinkSync(`/proc/${pid}/cwd`) === realpathSync(dir)
    );
  } catch {
    return false;
  }
}

/**
 * Stops an engine left over from an earlier run on the same data directory (its runner was killed
 * with -9, so no exit hook ran; the engine would hold the directory's locks). Found through its pid
 * file, or else by a /proc scan; a pid counts only when that process is `name` working in `dir`, so a
 * recycled pid is never signalled. SIGTERM, SIGKILL after `graceMs`; one line through `log`.
 */
export async function stopLeftover(
  name: string,
  pidFile: string,
  dir: string,
  log: (msg: string) => void = (m) => console.error(`[stack] ${m}`),
  graceMs = 15_000,
): Promise<void> {
  if (process.platform !== "linux" || !existsSync(dir)) return;
  let pid = Number.NaN;
  try {
    pid = Number(readFileSync(pidFile, "utf8").trim());
  } catch {
    /* no pid file */
  }
  if (!isEngineIn(pid, name, dir)) {
    const found = readdirSync("/proc").find((p) => /^\d+$/.test(p) && isEngineIn(Number(p), name, dir));
    if (found === undefined) return;
    pid = Number(found);
  }
  log(`${name} (pid ${pid}) left over from an earlier run on ${dir}: stopping it`);
  const deadline = Date.now() + graceMs;
  process.kill(pid, "SIGTERM");
  while (alive(pid)) {
    if (Date.now() > deadline) {
      process.kill(pid, "SIGKILL");
      break;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  while (alive(pid)) await new Promise((r) => setTimeout(r, 20));
  rmSync(pidFile, { force: true });
}

async function waitForPort(port: number, child: ChildProcess, name: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${name} exited with code ${child.exitCode} before it was ready`);
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect(port, "127.0.0.1");
      s.once("connect", () => {
        s.destroy();
        resolve(true);
      });
      s.once("error", () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`${name} did not listen on ${port} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

function track(child: ChildProcess, name: string, logLines: string[]): void {
  child.on("exit", killOnExit(child));
  const keep = (buf: Buffer) => {
    for (const line of buf.toString().split("\n")) if (line) logLines.push(line);
    if (logLines.length > 200) logLines.splice(0, logLines.length - 200);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  child.on("error", (e) => logLines.push(`${name}: ${e.message}`));
}

async function stopChild(child: ChildProcess, graceMs = 3000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
}

/**
 * Starts a private redis-server. `dir` holds its files; with `persist` it snapshots there (the
 * dev stack keeps data across runs), otherwise it is purely in memory (tests). `args`: further
 * flags (a read region's replica: `--replicaof host port`).
 */
export async function startRedis(opts: {
  dir: string;
  port?: number;
  persist?: boolean;
  args?: readonly string[];
}): Promise<Engine> {
  const bin = findBinary("redis-server");
  if (!bin) throw new Error("redis-server is not installed (apt-get install -y redis-server)");
  mkdirSync(opts.dir, { recursive: true });
  const pidFile = join(opts.dir, "redis-server.pid");
  await stopLeftover("redis-server", pidFile, opts.dir);
  const port = opts.port ?? (await freePort());
  const persistence = opts.persist
    ? ["--save", "60 1", "--appendonly", "yes", "--appendfsync", "everysec"]
    : ["--save", "", "--appendonly", "no"];
  const child = spawn(
    bin,
    [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      "--dir",
      opts.dir,
      "--daemonize",
      "no",
      "--pidfile",
      pidFile,
      ...persistence,
      ...(opts.args ?? []),
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  // Written here too, so a runner killed before the engine writes its own still leaves the pid behind.
  if (child.pid) writeFileSync(pidFile, `${child.pid}\n`);
  const log: string[] = [];
  track(child, "redis-server", log);
  try {
    await waitForPort(port, child, "redis-server");
  } catch (e) {
    child.kill("SIGKILL");
    throw new Error(`${(e as Error).message}\n${log.slice(-10).join("\n")}`);
  }
  return { host: "127.0.0.1", port, stop: () => stopChild(child) };
}

/**
 * Starts a private MariaDB with the flags from docs/development.md "Toolchain": utf8mb4, strict SQL mode, no Debian
 * defaults files. The data directory is initialised on first use and reused afterwards.
 */
export async function startMariadb(opts: { dir: string; port?: number }): Promise<MariaEngine> {
  const mariadbd = findBinary("mariadbd");
  const installDb = findBinary("mariadb-install-db");
  if (!mariadbd || !installDb) throw new Error("mariadb-server is not installed (apt-get install -y mariadb-server)");
  const datadir = join(opts.dir, "data");
  // A private tmpdir: MariaDB names temp files by pid and counter, and instances sharing /tmp
  // (parallel test runs) were seen failing on each other's temp tables.
  const tmpdir = join(opts.dir, "tmp");
  mkdirSync(tmpdir, { recursive: true });
  if (!existsSync(join(datadir, "mysql"))) {
    await new Promise<void>((resolve, reject) => {
      const p = spawn(
        installDb,
        [
          "--no-defaults",
          "--user=root",
          `--datadir=${datadir}`,
          `--tmpdir=${tmpdir}`,
          "--auth-root-authentication-method=normal",
          "--skip-test-db",
          "--skip-name-resolve",
          "--innodb-log-file-size=8M",
        ],
        { stdio: ["ignore", "pipe", "pipe"] },
      );
      let out = "";
      p.stdout?.on("data", (d) => (out += d));
      p.stderr?.on("data", (d) => (out += d));
      p.on("exit", (code) => (code === 0 ? resolve() : reject(new Error(`mariadb-install-db failed:\n${out}`))));
    });
  }
  const pidFile = join(opts.dir, "mysqld.pid");
  await stopLeftover("mariadbd", pidFile, datadir);
  const port = opts.port ?? (await freePort());
  const socket = join(opts.dir, "mysqld.sock");
  const child = spawn(
    mariadbd,
    [
      "--no-defaults",
      "--user=root",
      `--datadir=${datadir}`,
      `--tmpdir=${tmpdir}`,
      `--socket=${socket}`,
      `--port=${port}`,
      "--bind-address=127.0.0.1",
      `--pid-file=${pidFile}`,
      "--character-set-server=utf8mb4",
      "--collation-server=utf8mb4_unicode_ci",
      "--sql-mode=ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION",
      "--default-time-zone=+00:00",
      "--max-connections=500",
      "--innodb-fast-shutdown=2",
      "--skip-log-bin",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  if (child.pid) writeFileSync(pidFile, `${child.pid}\n`);
  const log: string[] = [];
  track(child, "mariadbd", log);
  try {
    await waitForPort(port, child, "mariadbd", 60_000);
  } catch (e) {
    child.kill("SIGKILL");
    throw new Error(`${(e as Error).message}\n${log.slice(-20).join("\n")}`);
  }
  // root has no password after install-db with normal auth; the stand-in logs in as root.
  return { host: "127.0.0.1", port, socket, user: "root", password: "", stop: () => stopChild(child) };
}

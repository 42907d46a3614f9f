/**
 * The Workers bundle served by workerd as a process of its own, bound to a stack: the runtime
 * matrix (tests/runtimes/) runs the same scenarios against it as against `bun src/entry/bun.ts`
 * and `deno run src/entry/deno.ts`, kill -9s its workerd mid-sale and starts it again on the same
 * port (so PUBLIC_URL, where the local QStash delivers /internal/* callbacks, stays valid).
 *
 *   <app env: the variable names of src/env.ts> \
 *     bun scripts/stack/workerd.ts --port 8788 [--bundle DIR] [--pid-file FILE] [--stack-env]
 *
 * - The bundle is `wrangler deploy --dry-run --outdir DIR` output, exactly what deploys
 *   (`buildWorker` below; without `--bundle` it is built into a temp dir first, ~1–2 s).
 * - Bindings are the environment variables src/env.ts knows (EnvSchema), standing in for
 *   wrangler.toml [vars] + secrets; credentials never travel in argv. `--stack-env` adds
 *   .local/stack.env (`npm run stack`'s settings) under them, for a Worker against the dev stack.
 * - workerd is started through miniflare (its entry worker routes requests to ours inside workerd;
 *   no JS of this process is on the request path). It listens on 127.0.0.1:PORT itself, so a
 *   kill -9 of workerd frees the port at once.
 * - The cron (wrangler.toml [triggers]) is the Worker's `scheduled` handler, triggered over HTTP:
 *   `GET /cdn-cgi/handler/scheduled?cron=*+*+*+*+*&time=<epoch ms>` answers `ok` once the event
 *   (its waitUntil included) is done.
 * - workerd's stdout/stderr (the Worker's console, and workerd's own "hung" / "canceled" /
 *   "different request context" reports) are copied to this process's stdout/stderr.
 * - workerd is tied to this process (PR_SET_PDEATHSIG via setpriv, where there is one): killing
 *   this script, even with SIGKILL, takes workerd with it.
 * - Prints `[workerd] ready on <url> (workerd pid N)` once it serves, and writes N to the pid file.
 *   Exits 1 when workerd dies under it (a kill -9: the parent restarts this script). SIGTERM /
 *   SIGINT stop workerd and exit (miniflare's own exit hook does both, with 128 + signal).
 */
import { execFile } from "node:child_process";
import { createRequire } from "node:module";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import type { Readable } from "node:stream";
import { parseArgs } from "node:util";

export const repoRoot = resolve(import.meta.dir, "../..");

/** Env that keeps wrangler offline and quiet (docs/development.md "Toolchain", wrangler offline). */
export const wranglerOfflineEnv = {
  WRANGLER_SEND_METRICS: "false",
  CLOUDFLARE_CF_FETCH_ENABLED: "false",
  WRANGLER_HIDE_BANNER: "true",
  CI: "true",
} as const;

export type BundleModuleType = "ESModule" | "CommonJS" | "Text" | "Data" | "CompiledWasm";

export interface BundleModule {
  type: BundleModuleType;
  /** Absolute path; its name relative to `outdir` is the specifier the bundle imports it by. */
  path: string;
}

export interface WorkerBundle {
  outdir: string;
  /** Absolute path of the entry module (`worker.js`). */
  main: string;
  /** Entry module first, then every attached module (Lua text modules, …), in miniflare's shape. */
  modules: BundleModule[];
  /** wrangler's combined stdout/stderr, for failure messages. */
  output: string;
}

/** Module type of an emitted file, by extension; undefined for non-module output (maps, README). */
function moduleType(name: string): BundleModuleType | undefined {
  // wrangler.toml's Text rule also collects the console's own stylesheet and browser scripts
  // (src/console/assets/*): emitted as `<sha1>-name.css|.js`, they are text, not ES modules.
  if (/^[0-9a-f]{40}-[^/]+\.(js|css)$/.test(name)) return "Text";
  if (name.endsWith(".js") || name.endsWith(".mjs")) return "ESModule";
  if (name.endsWith(".cjs")) return "CommonJS";
  if (name.endsWith(".lua") || name.endsWith(".txt") || name.endsWith(".sql")) return "Text";
  if (name.endsWith(".bin")) return "Data";
  if (name.endsWith(".wasm")) return "CompiledWasm";
  return undefined;
}

/** The modules of a bundle wrangler wrote to `outdir` (entry first; `entry` = its emitted file name). */
export function bundleModules(outdir: string, entry = "worker.js"): BundleModule[] {
  const main = join(outdir, entry);
  if (!existsSync(main))
    throw new Error(`no ${entry} in ${outdir}: not a \`wrangler deploy --dry-run --outdir\` output`);
  const modules: BundleModule[] = [{ type: "ESModule", path: main }];
  for (const name of readdirSync(outdir).sort()) {
    const type = moduleType(name);
    if (type && name !== entry) modules.push({ type, path: join(outdir, name) });
  }
  return modules;
}

/**
 * Builds the Workers bundle exactly as CI and `npm run build:worker` do: `wrangler deploy --dry-run
 * --outdir`, offline. `opts.config`: another wrangler.toml (the bench's hello Worker), whose entry
 * wrangler emits as `opts.entry`.
 */
export async function buildWorker(
  outdir: string,
  timeoutMs = 60_000,
  opts: { config?: string; entry?: string } = {},
): Promise<WorkerBundle> {
  const bin = join(repoRoot, "node_modules/.bin/wrangler");
  const extra = opts.config ? ["--config", opts.config] : [];
  const output = await new Promise<string>((res, rej) => {
    execFile(
      bin,
      ["deploy", "--dry-run", "--outdir", outdir, ...extra],
      {
        cwd: repoRoot,
        env: { ...process.env, ...wranglerOfflineEnv },
        timeout: timeoutMs,
        maxBuffer: 16 * 1024 * 1024,
      },
      (err, stdout, stderr) => {
        const text = `${stdout}${stderr}`;
        if (err) rej(new Error(`wrangler deploy --dry-run ${extra.join(" ")} failed (${err.message}):\n${text}`));
        else res(text);
      },
    );
  });
  const modules = bundleModules(outdir, opts.entry);
  return { outdir, main: modules[0]!.path, modules, output };
}

/** compatibility_date, compatibility_flags and [triggers] crons of the repo's wrangler.toml. */
export function wranglerSettings(): { compatibilityDate: string; compatibilityFlags: string[]; crons: string[] } {
  const toml = readFileSync(join(repoRoot, "wrangler.toml"), "utf8");
  const compatibilityDate = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(toml)?.[1];
  if (!compatibilityDate) throw new Error("wrangler.toml has no compatibility_date");
  const list = (key: string) =>
    JSON.parse(new RegExp(`^${key}\\s*=\\s*(\\[[^\\]]*\\])`, "m").exec(toml)?.[1] ?? "[]") as string[];
  return { compatibilityDate, compatibilityFlags: list("compatibility_flags"), crons: list("crons") };
}

/** The scheduled-event trigger URL of a Worker served by this script (miniflare's `unsafeTriggerHandlers`). */
export function scheduledUrl(base: string, cron: string, timeMs: number): string {
  return `${base.replace(/\/$/, "")}/cdn-cgi/handler/scheduled?cron=${encodeURIComponent(cron)}&time=${timeMs}`;
}

/**
 * `command args…` such that the process is SIGKILLed when its parent dies, however the parent dies
 * (kill -9 included, where no exit hook runs): Linux PR_SET_PDEATHSIG through util-linux `setpriv`,
 * which then execs the command (same pid). Unchanged where there is no setpriv.
 */
export function dieWithParent(command: string, args: string[]): { command: string; args: string[] } {
  if (process.platform !== "linux") return { command, args };
  const setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].find((p) => existsSync(p));
  return setpriv ? { command: setpriv, args: ["--pdeathsig", "KILL", "--", command, ...args] } : { command, args };
}

/**
 * Makes miniflare start workerd through a wrapper that ties it to its parent (dieWithParent): a
 * launcher that is SIGKILLed must not leave workerd serving its port. Sets MINIFLARE_WORKERD_PATH in
 * this process's env (miniflare here, or a `wrangler dev` spawned with this env). Skipped when
 * MINIFLARE_WORKERD_PATH is set already, or without setpriv.
 */
export function workerdDiesWithUs(stateDir: string | undefined): void {
  if (process.env.MINIFLARE_WORKERD_PATH) return;
  const bin = (createRequire(join(repoRoot, "node_modules/miniflare/package.json"))("workerd") as { default: string })
    .default;
  const wrapped = dieWithParent(bin, []);
  if (wrapped.command === bin) return;
  // Next to the pid file when there is one (the caller's dir, cleaned by the caller), else a temp dir.
  const dir = stateDir ?? mkdtempSync(join(tmpdir(), "cityhub-workerd-bin-"));
  if (!stateDir) process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
  const q = (a: string) => `'${a.replace(/'/g, `'\\''`)}'`;
  const wrapper = join(dir, `workerd-${process.pid}.sh`);
  writeFileSync(wrapper, `#!/bin/sh\nexec ${[wrapped.command, ...wrapped.args].map(q).join(" ")} "$@"\n`, {
    mode: 0o755,
  });
  process.env.MINIFLARE_WORKERD_PATH = wrapper;
}

/** Pids of this process's children (Linux /proc). */
function childPids(): number[] {
  const out = new Set<number>();
  try {
    for (const tid of readdirSync(`/proc/${process.pid}/task`)) {
      const text = readFileSync(`/proc/${process.pid}/task/${tid}/children`, "utf8").trim();
      for (const p of text.split(/\s+/)) if (p) out.add(Number(p));
    }
  } catch {
    /* no /proc children files: fall back to a scan */
  }
  if (out.size === 0) {
    for (const name of readdirSync("/proc")) {
      if (!/^\d+$/.test(name)) continue;
      try {
        const stat = readFileSync(`/proc/${name}/stat`, "utf8");
        // pid (comm) state ppid …: comm may contain spaces, so read after the last ')'.
        const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
        if (ppid === process.pid) out.add(Number(name));
      } catch {
        /* gone meanwhile */
      }
    }
  }
  return [...out];
}

function isWorkerd(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8")
      .split("\0")
      .some((a) => /(^|\/)workerd$/.test(a));
  } catch {
    return false;
  }
}

function alive(pid: number): boolean {
  try {
    // A zombie still answers signal 0; its state in /proc says it is dead.
    process.kill(pid, 0);
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      port: { type: "string", default: "8788" },
      host: { type: "string", default: "127.0.0.1" },
      bundle: { type: "string" },
      "pid-file": { type: "string" },
      "stack-env": { type: "boolean", default: false },
    },
  });
  const port = Number(values.port);
  if (!Number.isInteger(port) || port <= 0 || port > 65535) {
    console.error("usage: workerd.ts --port PORT [--bundle DIR] [--pid-file FILE] [--stack-env]");
    process.exit(2);
  }
  const { EnvSchema } = await import("../../src/env.ts");
  const { loadStackEnv } = await import("./env-file.ts");
  const known = new Set(Object.keys(EnvSchema.shape));
  const source: Record<string, string | undefined> = { ...(values["stack-env"] ? loadStackEnv() : {}), ...process.env };
  const bindings: Record<string, string> = {};
  for (const [k, v] of Object.entries(source)) if (known.has(k) && v !== undefined) bindings[k] = v;

  let outdir = values.bundle;
  if (!outdir) {
    const built = mkdtempSync(join(tmpdir(), "cityhub-worker-"));
    process.once("exit", () => rmSync(built, { recursive: true, force: true }));
    outdir = built;
    await buildWorker(outdir);
  }
  const modules = bundleModules(outdir);
  const { compatibilityDate, compatibilityFlags } = wranglerSettings();

  workerdDiesWithUs(values["pid-file"] ? dirname(resolve(values["pid-file"])) : undefined);
  const { Miniflare } = await import("miniflare");
  const before = new Set(childPids());
  const mf = new Miniflare({
    host: values.host,
    port,
    // The cron is triggered over HTTP (/cdn-cgi/handler/scheduled); no per-request log lines, no cf.json download.
    unsafeTriggerHandlers: true,
    logRequests: false,
    cf: false,
    handleRuntimeStdio(stdout: Readable, stderr: Readable) {
      stdout.on("data", (b: Buffer) => process.stdout.write(b));
      stderr.on("data", (b: Buffer) => process.stderr.write(b));
    },
    modules,
    modulesRoot: dirname(modules[0]!.path),
    compatibilityDate,
    compatibilityFlags,
    bindings,
  });

  let stopping = false;
  const stop = (code: number, why: string) => {
    if (stopping) return;
    stopping = true;
    console.error(`[workerd] ${why}: stopping`);
    void Promise.race([mf.dispose(), new Promise((r) => setTimeout(r, 3000))]).finally(() => process.exit(code));
  };
  process.on("SIGTERM", () => stop(0, "SIGTERM"));
  process.on("SIGINT", () => stop(0, "SIGINT"));

  const url = await mf.ready;
  const workerdPid = childPids().find((p) => !before.has(p) && isWorkerd(p)) ?? childPids().find(isWorkerd);
  if (!workerdPid) {
    console.error("[workerd] started, but no workerd child process found");
    stop(1, "no workerd pid");
    return;
  }
  if (values["pid-file"]) writeFileSync(values["pid-file"], `${workerdPid}\n`);
  console.error(`[workerd] ready on ${url.href} (workerd pid ${workerdPid})`);
  // workerd killed under us (kill -9): nothing serves the port any more; exit so the parent restarts us.
  const watch = setInterval(() => {
    if (!alive(workerdPid)) {
      clearInterval(watch);
      stop(1, `workerd (pid ${workerdPid}) died`);
    }
  }, 50);
}

if (import.meta.main) await main();

/**
 * Builds the Workers bundle exactly as CI and `npm run build:worker` do — `wrangler deploy --dry-run
 * --outdir <dir>`, offline — and lists the emitted modules so miniflare can load them as uploaded.
 */
import { execFile } from "node:child_process";
import { readdirSync } from "node:fs";
import { join, resolve } from "node:path";

export const repoRoot = resolve(import.meta.dir, "../..");

/** Env that keeps wrangler offline and quiet (docs/toolchain.md "wrangler offline"). */
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
  if (name.endsWith(".js") || name.endsWith(".mjs")) return "ESModule";
  if (name.endsWith(".cjs")) return "CommonJS";
  if (name.endsWith(".lua") || name.endsWith(".txt") || name.endsWith(".sql")) return "Text";
  if (name.endsWith(".bin")) return "Data";
  if (name.endsWith(".wasm")) return "CompiledWasm";
  return undefined;
}

export async function buildWorker(outdir: string, timeoutMs = 60_000): Promise<WorkerBundle> {
  const bin = join(repoRoot, "node_modules/.bin/wrangler");
  const output = await new Promise<string>((res, rej) => {
    execFile(
      bin,
      ["deploy", "--dry-run", "--outdir", outdir],
      { cwd: repoRoot, env: { ...process.env, ...wranglerOfflineEnv }, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const text = `${stdout}${stderr}`;
        if (err) rej(new Error(`wrangler deploy --dry-run failed (${err.message}):\n${text}`));
        else res(text);
      },
    );
  });
  const main = join(outdir, "worker.js");
  const modules: BundleModule[] = [{ type: "ESModule", path: main }];
  for (const name of readdirSync(outdir).sort()) {
    const type = moduleType(name);
    if (type && name !== "worker.js") modules.push({ type, path: join(outdir, name) });
  }
  return { outdir, main, modules, output };
}

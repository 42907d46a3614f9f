/**
 * Workers bundles for the bench, built the way CI and `npm run build:worker` build the real one:
 * `wrangler deploy --dry-run --outdir <dir>`, offline, through scripts/stack/workerd.ts (the build
 * the tests use). The result lists the emitted modules in the
 * shape miniflare takes (`modules: [{ type, path }]`, entry first), plus the compatibility date and
 * flags of wrangler.toml, so servers/workerd-serve.ts can boot it in workerd.
 *
 *   buildAppWorker(outdir)            the app: wrangler.toml at the repo root (src/entry/worker.ts)
 *   buildModuleWorker(entry, outdir)  any module (e.g. servers/worker-hello.ts) with the same
 *                                     compatibility date and flags, from a generated wrangler.toml
 */
import { writeFileSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { buildWorker, repoRoot, wranglerSettings, type BundleModuleType } from "../../stack/workerd.ts";

export { repoRoot };

export type ModuleType = BundleModuleType;

export interface WorkerBundle {
  outdir: string;
  /** Entry module first, then every attached module (the Lua text modules, …). */
  modules: Array<{ type: ModuleType; path: string }>;
  compatibilityDate: string;
  compatibilityFlags: string[];
  /** How long wrangler took, ms. */
  buildMs: number;
}

/** compatibility_date and compatibility_flags of the repo's wrangler.toml. */
export function wranglerCompat(): { compatibilityDate: string; compatibilityFlags: string[] } {
  const { compatibilityDate, compatibilityFlags } = wranglerSettings();
  return { compatibilityDate, compatibilityFlags };
}

/** scripts/stack/workerd.ts's build (the one the tests use), timed, in the bench's shape. */
async function build(
  outdir: string,
  timeoutMs: number,
  opts: { config?: string; entry?: string } = {},
): Promise<WorkerBundle> {
  const t0 = performance.now();
  const built = await buildWorker(outdir, timeoutMs, opts);
  return { outdir, modules: built.modules, ...wranglerCompat(), buildMs: performance.now() - t0 };
}

/** The real Worker (wrangler.toml: src/entry/worker.ts, Lua text rules, nodejs_compat). */
export async function buildAppWorker(outdir: string, timeoutMs = 60_000): Promise<WorkerBundle> {
  return await build(outdir, timeoutMs);
}

/** A Worker from one module file, bundled by wrangler with the app's compatibility date and flags. */
export async function buildModuleWorker(
  entry: string,
  name: string,
  outdir: string,
  timeoutMs = 60_000,
): Promise<WorkerBundle> {
  const { compatibilityDate, compatibilityFlags } = wranglerCompat();
  const config = join(outdir, "..", `${name}.wrangler.toml`);
  writeFileSync(
    config,
    [
      `name = ${JSON.stringify(name)}`,
      `main = ${JSON.stringify(resolve(entry))}`,
      `compatibility_date = ${JSON.stringify(compatibilityDate)}`,
      `compatibility_flags = ${JSON.stringify(compatibilityFlags)}`,
      "",
    ].join("\n"),
  );
  return await build(outdir, timeoutMs, { config, entry: `${basename(entry).replace(/\.[cm]?ts$/, "")}.js` });
}

/** The workerd binary that miniflare and wrangler use (the `workerd` package's platform build). */
export const WORKERD_BIN = join(repoRoot, "node_modules/@cloudflare/workerd-linux-64/bin/workerd");

/** A Cap'n Proto text literal (C-style escapes, like JSON's for the characters that occur here). */
const capnpText = (s: string): string => JSON.stringify(s);

/**
 * A workerd config (Cap'n Proto text) that serves `bundle` on 127.0.0.1:`port` the way a Workers
 * deployment runs it, with nothing in front: one worker service (the bundle's modules, embedded
 * from their files; the compatibility date and flags; `bindings` as text bindings, i.e. [vars] and
 * secrets), one HTTP socket, and the global outbound as a network service that may reach loopback
 * (the stand-ins), which workerd's default "internet" service refuses. Written to `path` (in the
 * bundle's directory: embeds are relative to the config file).
 */
export function writeWorkerdConfig(
  bundle: WorkerBundle,
  bindings: Record<string, string>,
  port: number,
  path: string,
): void {
  const rel = (p: string) => {
    if (!p.startsWith(`${bundle.outdir}/`)) throw new Error(`module ${p} is outside ${bundle.outdir}`);
    return p.slice(bundle.outdir.length + 1);
  };
  const kind: Record<WorkerBundle["modules"][number]["type"], string> = {
    ESModule: "esModule",
    CommonJS: "commonJsModule",
    Text: "text",
    Data: "data",
    CompiledWasm: "wasm",
  };
  const modules = bundle.modules.map(
    (m) => `(name = ${capnpText(rel(m.path))}, ${kind[m.type]} = embed ${capnpText(rel(m.path))})`,
  );
  const vars = Object.entries(bindings).map(([k, v]) => `(name = ${capnpText(k)}, text = ${capnpText(v)})`);
  const text = `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .worker),
    (name = "internet", network = (allow = ["public", "private", "local"])),
  ],
  sockets = [(name = "http", address = ${capnpText(`127.0.0.1:${port}`)}, http = (), service = "main")],
);
const worker :Workerd.Worker = (
  modules = [
    ${modules.join(",\n    ")}
  ],
  compatibilityDate = ${capnpText(bundle.compatibilityDate)},
  compatibilityFlags = [${bundle.compatibilityFlags.map(capnpText).join(", ")}],
  bindings = [
    ${vars.join(",\n    ")}
  ],
  globalOutbound = "internet",
);
`;
  writeFileSync(path, text);
}

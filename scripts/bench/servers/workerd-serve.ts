/**
 * Bench server: a Workers bundle (lib/worker-bundle.ts: `wrangler deploy --dry-run` output) booted
 * in workerd through miniflare and served on 127.0.0.1:$PORT. Requests go straight to workerd's own
 * socket (miniflare's entry worker routes them to ours inside workerd); this bun process only
 * starts and stops workerd, so nothing JS-side of Node/Bun sits on the request path — unlike
 * `wrangler dev` (~2k req/s through its proxy; never benchmarked).
 *
 * Env:
 *   PORT           the port workerd listens on
 *   WORKERD_SPEC   JSON {modules, compatibilityDate, compatibilityFlags, bindings}: the bundle's
 *                  modules (entry first, absolute paths), and the string bindings (the app's
 *                  [vars] + secrets — the bench stack's settings)
 *
 * workerd's stdout/stderr (the Worker's console) is copied to this process's stdout/stderr, where
 * the parent (lib/servers.ts) counts error lines. Stops on SIGTERM (disposes miniflare, which
 * ends workerd).
 */
import { dirname } from "node:path";
import type { Readable } from "node:stream";
import { Miniflare } from "miniflare";

interface Spec {
  modules: Array<{ type: "ESModule" | "CommonJS" | "Text" | "Data" | "CompiledWasm"; path: string }>;
  compatibilityDate: string;
  compatibilityFlags: string[];
  bindings: Record<string, string>;
}

const spec = JSON.parse(process.env.WORKERD_SPEC ?? "null") as Spec | null;
if (!spec?.modules?.length) throw new Error("WORKERD_SPEC is required");
const port = Number(process.env.PORT);
if (!Number.isInteger(port) || port <= 0) throw new Error("PORT is required");

const mf = new Miniflare({
  host: "127.0.0.1",
  port,
  // No request log line per request (miniflare's default prints one), no cf.json download.
  logRequests: false,
  cf: false,
  handleRuntimeStdio(stdout: Readable, stderr: Readable) {
    stdout.on("data", (b: Buffer) => process.stdout.write(b));
    stderr.on("data", (b: Buffer) => process.stderr.write(b));
  },
  modules: spec.modules,
  modulesRoot: dirname(spec.modules[0]!.path),
  compatibilityDate: spec.compatibilityDate,
  compatibilityFlags: spec.compatibilityFlags,
  bindings: spec.bindings,
});
const url = await mf.ready;
console.log(`workerd-serve listening on ${url.href}`);

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  void Promise.race([mf.dispose(), new Promise((r) => setTimeout(r, 3000))]).finally(() => process.exit(0));
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);

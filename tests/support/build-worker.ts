/**
 * Builds the Workers bundle exactly as CI and `npm run build:worker` do — `wrangler deploy --dry-run
 * --outdir <dir>`, offline — and lists the emitted modules so miniflare can load them as uploaded.
 * The implementation lives with the stack's workerd launcher (scripts/stack/workerd.ts), which
 * serves the same bundle as a process of its own for the runtime matrix (tests/runtimes/).
 */
export {
  buildWorker,
  bundleModules,
  repoRoot,
  wranglerOfflineEnv,
  type BundleModule,
  type BundleModuleType,
  type WorkerBundle,
} from "../../scripts/stack/workerd.ts";

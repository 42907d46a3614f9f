#!/usr/bin/env node
// Bootstraps a fresh machine that has only Node.js, before any Bun code runs (so: plain Node, no
// dependencies). Used by `npm run dev`, `npm run stack` and `npm test`:
//   1. npm install when node_modules is missing or older than package.json / the lockfile
//      (Bun itself comes from npm as a dev dependency);
//   2. redis-server and mariadb-server from apt-get when missing and we may install (root or
//      passwordless sudo); otherwise stop with the one command to run;
//   3. with --browser (`npm test`): Debian's `chromium` the same way, for the browser tests
//      (tests/browser/, driven by the playwright-core dev dependency, which never downloads a
//      browser). CHROMIUM_PATH naming an existing binary stands in for the package.
// One apt-get call installs everything missing (with `apt-get update` once, when it is needed).
// Flags: --engines (default on), --no-engines, --tools (also wrk, for benchmarks), --browser.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const args = new Set(process.argv.slice(2));
const say = (msg) => process.stderr.write(`[setup] ${msg}\n`);

function mtime(p) {
  try {
    return statSync(p).mtimeMs;
  } catch {
    return 0;
  }
}

function ensureNodeModules() {
  const marker = join(root, "node_modules", ".package-lock.json");
  const bun = join(root, "node_modules", ".bin", "bun");
  // A dev dependency added since the last install (playwright-core for --browser) counts as stale too.
  const missing = !existsSync(bun) || (args.has("--browser") && !existsSync(join(root, "node_modules", "playwright-core", "package.json")));
  const stale = missing || mtime(marker) < Math.max(mtime(join(root, "package.json")), mtime(join(root, "package-lock.json")));
  if (!stale) return;
  say("installing npm dependencies (npm install)…");
  const r = spawnSync("npm", ["install", "--no-audit", "--no-fund"], { cwd: root, stdio: "inherit" });
  if (r.status !== 0) process.exit(r.status ?? 1);
}

function which(bin) {
  for (const d of (process.env.PATH ?? "").split(":").concat(["/usr/sbin", "/usr/local/sbin", "/sbin"])) {
    if (d && existsSync(join(d, bin))) return join(d, bin);
  }
  return null;
}

function canInstall() {
  if (!which("apt-get")) return { ok: false, prefix: [] };
  if (process.getuid && process.getuid() === 0) return { ok: true, prefix: [] };
  if (which("sudo") && spawnSync("sudo", ["-n", "true"], { stdio: "ignore" }).status === 0) return { ok: true, prefix: ["sudo", "-n"] };
  return { ok: false, prefix: [] };
}

function ensurePackages(wanted) {
  const missing = wanted.filter(([bin]) => !which(bin)).map(([, pkg]) => pkg);
  if (missing.length === 0) return;
  const line = `sudo apt-get update && sudo apt-get install -y ${missing.join(" ")}`;
  const hint = missing.includes("chromium") ? " (chromium is for the browser tests: CHROMIUM_PATH=/path/to/chromium stands in for it)" : "";
  const { ok, prefix } = canInstall();
  if (!ok) {
    say(`missing ${missing.join(", ")}${hint}. Install them with:\n\n    ${line}\n`);
    process.exit(1);
  }
  say(`installing ${missing.join(" ")} with apt-get…`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  const run = (cmd) => {
    const full = [...prefix, ...cmd];
    const r = spawnSync(full[0], full.slice(1), { stdio: ["ignore", "inherit", "inherit"], env });
    return r.status === 0;
  };
  // Update the package lists first only when an install without it fails (saves ~10 s when fresh).
  if (!run(["apt-get", "install", "-y", "-q", "--no-install-recommends", ...missing])) {
    if (!run(["apt-get", "update", "-q"]) || !run(["apt-get", "install", "-y", "-q", "--no-install-recommends", ...missing])) {
      say(`apt-get failed${hint}. Install them yourself with:\n\n    ${line}\n`);
      process.exit(1);
    }
  }
}

ensureNodeModules();
const pkgs = [];
if (!args.has("--no-engines")) {
  pkgs.push(["redis-server", "redis-server"], ["mariadbd", "mariadb-server"]);
  if (args.has("--tools")) pkgs.push(["wrk", "wrk"]);
}
const chromiumPath = process.env.CHROMIUM_PATH;
if (args.has("--browser") && !(chromiumPath && existsSync(chromiumPath))) pkgs.push(["chromium", "chromium"]);
ensurePackages(pkgs);
try {
  execFileSync(join(root, "node_modules", ".bin", "bun"), ["--version"], { stdio: "ignore" });
} catch {
  say("node_modules/.bin/bun does not run; reinstall with: rm -rf node_modules && npm install");
  process.exit(1);
}

/**
 * The import graph of src/, read from the source text (no compiler run): every static import and
 * re-export with its specifier, and whether it carries a value (a type-only import — `import type`,
 * or every named specifier marked `type` — runs no code and creates no load-order edge).
 *
 * Layers, top to bottom (docs/architecture.md §3): entry → app → the composition root
 * (deps.ts, isolate.ts) → routes → console → jobs → http and openapi → services → cache →
 * redis / db / queue / blob / sms / payments / ports → util and the ground files (env, log, errors, …).
 * A value import may run down or sideways, never up.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

export interface Edge {
  from: string;
  to: string;
  value: boolean;
  line: number;
}

/** Static imports and re-exports (multi-line specifier lists included); dynamic import() is not a load edge. */
const IMPORT_RE = /^(import|export)\s+(type\s+)?([^;]*?)\s+from\s+["']([^"']+)["']|^import\s+["']([^"']+)["']/gms;

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return files(p);
    return /\.(ts|tsx)$/.test(name) && !name.endsWith(".d.ts") ? [p] : [];
  });
}

function typeOnly(typeKeyword: string | undefined, clause: string): boolean {
  if (typeKeyword) return true;
  const m = /^\{([\s\S]*)\}$/.exec(clause.trim());
  if (!m) return false; // default or namespace import: a value
  const names = (m[1] ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
  return names.length > 0 && names.every((n) => n.startsWith("type "));
}

/** Edges between files under `root` (paths relative to it, e.g. "services/shops.ts"). */
export function importGraph(root: string): Edge[] {
  const edges: Edge[] = [];
  for (const file of files(root)) {
    const text = readFileSync(file, "utf8");
    for (const m of text.matchAll(IMPORT_RE)) {
      const spec = m[4] ?? m[5] ?? "";
      if (!spec.startsWith(".")) continue;
      const target = resolve(dirname(file), spec);
      if (!/\.(ts|tsx)$/.test(target)) continue; // .lua, .css, .js text modules
      const line = text.slice(0, m.index).split("\n").length;
      edges.push({
        from: relative(root, file),
        to: relative(root, target),
        value: m[5] !== undefined || !typeOnly(m[2], m[3] ?? ""),
        line,
      });
    }
  }
  return edges;
}

const byFile: Record<string, number> = { "app.ts": 1, "deps.ts": 2, "isolate.ts": 2, "caches.ts": 2 };
/** The ground: files every layer may import. */
const GROUND = ["env.ts", "errors.ts", "log.ts", "resilience.ts", "runtime.ts", "types.ts"];
const byDir: Record<string, number> = {
  entry: 0,
  routes: 3,
  openapi: 6,
  console: 4,
  jobs: 5,
  http: 6,
  services: 7,
  cache: 8,
  redis: 9,
  db: 9,
  queue: 9,
  blob: 9,
  sms: 9,
  payments: 9,
  ports: 9,
  util: 10,
  types: 10,
};

/** Whether `path` (a file of src/) sits in a folder or file this map places (a new one must be placed here). */
export function placed(path: string): boolean {
  const top = path.split("/")[0] ?? "";
  return path in byFile || GROUND.includes(path) || (path.includes("/") && top in byDir);
}

/** Layer of a file: a smaller number is higher up. */
export function layerOf(path: string): number {
  const top = path.split("/")[0] ?? "";
  if (path in byFile) return byFile[path] as number;
  if (path.includes("/") && top in byDir) return byDir[top] as number;
  return 10; // the ground
}

/** Value imports that run up a layer. */
export function upward(edges: Edge[]): Edge[] {
  return edges.filter((e) => e.value && layerOf(e.to) < layerOf(e.from));
}

/** Value-import cycles (strongly connected components of more than one file, or a self-import). */
export function valueCycles(edges: Edge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const e of edges) if (e.value) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const on = new Set<string>();
  const out: string[][] = [];
  let i = 0;
  const visit = (v: string) => {
    index.set(v, i);
    low.set(v, i++);
    stack.push(v);
    on.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v) as number, index.get(w) as number));
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = [];
      let w: string;
      do {
        w = stack.pop() as string;
        on.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1 || (next.get(v) ?? []).includes(v)) out.push(scc.sort());
    }
  };
  for (const v of new Set(edges.map((e) => e.from))) if (!index.has(v)) visit(v);
  return out;
}

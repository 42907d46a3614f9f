/** Reads and writes `.local/stack.env` (dotenv: KEY=value per line), the local stack's settings. */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

export const ROOT = join(import.meta.dir, "..", "..");
export const LOCAL_DIR = join(ROOT, ".local");
export const STACK_ENV_FILE = join(LOCAL_DIR, "stack.env");

export function parseDotenv(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split(/\r?\n/)) {
    const m = /^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)\s*$/.exec(line);
    if (!m?.[1]) continue;
    let v = m[2] ?? "";
    if ((v.startsWith('"') && v.endsWith('"')) || (v.startsWith("'") && v.endsWith("'"))) v = v.slice(1, -1);
    out[m[1]] = v;
  }
  return out;
}

export function loadStackEnv(file = STACK_ENV_FILE): Record<string, string> {
  return existsSync(file) ? parseDotenv(readFileSync(file, "utf8")) : {};
}

export function writeStackEnv(values: Record<string, string>, file = STACK_ENV_FILE): void {
  mkdirSync(dirname(file), { recursive: true });
  const body = Object.entries(values)
    .map(([k, v]) => `${k}=${v}`)
    .join("\n");
  writeFileSync(file, `# written by \`npm run stack\`; regenerated on every start\n${body}\n`, { mode: 0o600 });
}

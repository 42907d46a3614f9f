/**
 * `npm run migrate` — applies src/db/migrations against DATABASE_URL (default: the local stack's
 * .local/stack.env). Works against hosted PlanetScale as well as the local stand-in.
 */
import { Client } from "@planetscale/database";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { migrate, type Migration } from "../src/db/migrate.ts";
import { loadStackEnv } from "./stack/env-file.ts";

export const MIGRATIONS_DIR = join(import.meta.dir, "..", "src", "db", "migrations");

export function readMigrations(dir = MIGRATIONS_DIR): Migration[] {
  return readdirSync(dir)
    .filter((f) => f.endsWith(".sql"))
    .sort()
    .map((name) => ({ name, sql: readFileSync(join(dir, name), "utf8") }));
}

export async function runMigrations(databaseUrl: string, log: (msg: string) => void = () => {}) {
  const db = new Client({ url: databaseUrl });
  return await migrate(db, readMigrations(), log);
}

if (import.meta.main) {
  const env = { ...loadStackEnv(), ...process.env };
  const url = env.DATABASE_URL;
  if (!url) {
    console.error(
      "DATABASE_URL is not set and .local/stack.env is missing: start the stack with `npm run stack` first",
    );
    process.exit(1);
  }
  const res = await runMigrations(url, (m) => console.log(m));
  console.log(`migrations: ${res.applied.length} applied, ${res.skipped.length} already applied`);
}

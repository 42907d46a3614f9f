/**
 * `npm run migrate` — applies src/db/migrations against DATABASE_URL (default: the local stack's
 * .local/stack.env). Works against hosted PlanetScale as well as the local stand-in. A failure is
 * one line on stderr naming the database (never its password): exit 2 for a malformed URL, 1 for a
 * database that cannot be reached or refuses.
 */
import { Client, DatabaseError } from "@planetscale/database";
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
  let where: string;
  try {
    const u = new URL(url);
    where = `${u.host}${u.pathname}`;
  } catch {
    console.error("migrate: DATABASE_URL is not a URL (expected mysql://user:password@host/database)");
    process.exit(2);
  }
  const password = decodeURIComponent(new URL(url).password);
  const oneLine = (err: unknown) => {
    const text = (err instanceof Error ? err.message : String(err)).split("\n")[0] ?? "";
    return (password ? text.replaceAll(password, "***") : text).slice(0, 300);
  };
  try {
    const res = await runMigrations(url, (m) => console.log(m));
    console.log(`migrations: ${res.applied.length} applied, ${res.skipped.length} already applied`);
  } catch (err) {
    console.error(
      err instanceof DatabaseError
        ? `migrate: the database at ${where} refused: ${oneLine(err)}`
        : `migrate: cannot reach the database at ${where} (${oneLine(err)}): check DATABASE_URL and that the database is up`,
    );
    process.exit(1);
  }
}

/**
 * Applies `src/db/migrations/*.sql` in name order, each at most once, recorded in a ledger table.
 *
 * Runtime-agnostic: callers pass the SQL texts (scripts/migrate.ts reads them from disk). MySQL
 * DDL is not transactional, so a migration is recorded only after all its statements ran, and
 * every statement is written to be harmless when re-run (IF NOT EXISTS): a crash mid-migration
 * is repaired by running the migrator again. An applied migration whose text changed is an error
 * (write a new migration instead of editing an applied one).
 */
import type { DbPort } from "../deps.ts";
import { sha256Hex } from "../util/crypto.ts";

export interface Migration {
  /** File name, e.g. `001_classic_schema.sql`; order of application is the order of names. */
  name: string;
  sql: string;
}

export interface MigrateResult {
  applied: string[];
  skipped: string[];
}

const LEDGER = `CREATE TABLE IF NOT EXISTS schema_migrations (
  name VARCHAR(255) NOT NULL PRIMARY KEY,
  checksum CHAR(64) NOT NULL,
  applied_at DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`;

export { sha256Hex };

/**
 * Splits a file into statements on `;` at the end of a line, dropping `--` comment lines.
 * Our migrations keep semicolons out of string literals, so no SQL parser is needed.
 */
export function splitStatements(sql: string): string[] {
  return sql
    .split(/;\s*(?:\r?\n|$)/)
    .map((s) =>
      s
        .split(/\r?\n/)
        .filter((line) => !/^\s*--/.test(line))
        .join("\n")
        .trim(),
    )
    .filter((s) => s.length > 0);
}

export async function migrate(
  db: DbPort,
  migrations: Migration[],
  onProgress?: (msg: string) => void,
): Promise<MigrateResult> {
  await db.execute(LEDGER);
  const rows = (await db.execute("SELECT name, checksum FROM schema_migrations")).rows as {
    name: string;
    checksum: string;
  }[];
  const done = new Map(rows.map((r) => [r.name, r.checksum]));
  const result: MigrateResult = { applied: [], skipped: [] };
  for (const m of [...migrations].sort((a, b) => a.name.localeCompare(b.name))) {
    const checksum = await sha256Hex(m.sql);
    const previous = done.get(m.name);
    if (previous !== undefined) {
      if (previous !== checksum)
        throw new Error(`migration ${m.name} changed after it was applied (write a new migration instead)`);
      result.skipped.push(m.name);
      continue;
    }
    onProgress?.(`applying ${m.name}`);
    for (const stmt of splitStatements(m.sql)) await db.execute(stmt);
    // INSERT IGNORE: a concurrent migrator that got here first is not an error.
    await db.execute("INSERT IGNORE INTO schema_migrations (name, checksum) VALUES (?, ?)", [m.name, checksum]);
    result.applied.push(m.name);
  }
  return result;
}

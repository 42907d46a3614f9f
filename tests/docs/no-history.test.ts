/**
 * Comments in src/ and lua/ state decisions, not tracker history: no file there names an issue
 * ("issue 16", "issues 15 and 16", "#18"). History belongs in commit messages and docs/decisions/.
 * Exception: migrations applied before this rule keep their exact text, because src/db/migrate.ts
 * checksums a migration's whole text, comments included, and refuses one that changed.
 */
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";

const ROOT = join(import.meta.dir, "../..");
const FROZEN_MIGRATIONS = new Set([
  "src/db/migrations/005_payments.sql",
  "src/db/migrations/006_purchase_rules.sql",
  "src/db/migrations/007_campaigns.sql",
  "src/db/migrations/008_seckill_shards.sql",
]);

/** "issue 16", "Issues 15 and 16", "issue #7", "#18" — each with its line number. */
export function issueMentions(text: string): { line: number; match: string }[] {
  const out: { line: number; match: string }[] = [];
  text.split("\n").forEach((l, i) => {
    for (const m of l.matchAll(/\bissues? #?\d+|(?<![\w&])#\d{1,5}\b(?![\w-])/gi))
      out.push({ line: i + 1, match: m[0] });
  });
  return out;
}

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

describe("src/ and lua/ name no issue", () => {
  test("no file mentions an issue number", () => {
    const found: string[] = [];
    for (const p of [...files(join(ROOT, "src")), ...files(join(ROOT, "lua"))]) {
      const rel = relative(ROOT, p);
      if (FROZEN_MIGRATIONS.has(rel) || !/\.(ts|tsx|js|lua|sql|css|html|md)$/.test(rel)) continue;
      for (const m of issueMentions(readFileSync(p, "utf8"))) found.push(`${rel}:${m.line}: ${m.match}`);
    }
    expect(found).toEqual([]);
  });

  test("the matcher finds the forms history took, and leaves ordinary text alone", () => {
    const sample = [
      "// Seckill shards (issue 18): one database",
      "// measured before and after (issues 15 and 16)",
      "/* see #42 */",
      "-- Payments (Issue #8)",
      "// tokens issued at login; 16 issues of a token; color: #fff; &#39; x#1",
    ].join("\n");
    expect(issueMentions(sample).map((m) => m.line)).toEqual([1, 2, 3, 4]);
  });
});

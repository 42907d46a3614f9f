/**
 * `npm run migrate` (scripts/migrate.ts) as an operator meets it when the database cannot be
 * reached (a wrong host, a closed port, a typo in DATABASE_URL): one line that names the database
 * and says what to check, and a non-zero exit — never a stack trace.
 */
import { describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { freePort } from "../../scripts/stack/engines.ts";
import { repoRoot } from "../../scripts/stack/workerd.ts";

function migrate(databaseUrl: string) {
  const r = spawnSync(process.execPath, [join(repoRoot, "scripts/migrate.ts")], {
    cwd: repoRoot,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: process.env.HOME ?? "/tmp", DATABASE_URL: databaseUrl },
    encoding: "utf8",
    timeout: 60_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr.trim() };
}

describe("npm run migrate against an unreachable database", () => {
  test("a closed port: one line naming the host, exit 1", async () => {
    const port = await freePort(); // nothing listens there once freePort has closed it
    const r = migrate(`http://user:secret-password@127.0.0.1:${port}/cityhub`);
    expect(r.code).toBe(1);
    expect(r.stderr.split("\n")).toHaveLength(1);
    expect(r.stderr).toContain(`127.0.0.1:${port}`);
    expect(r.stderr).toMatch(/cannot reach the database/);
    expect(r.stderr).not.toContain("secret-password");
    expect(r.stderr).not.toMatch(/^\s+at /m);
  });

  test("a malformed DATABASE_URL: one line, exit 2", () => {
    const r = migrate("not a url");
    expect(r.code).toBe(2);
    expect(r.stderr.split("\n")).toHaveLength(1);
    expect(r.stderr).toContain("DATABASE_URL");
  });
});

/**
 * One operator layer (issue 17 item 1): routes/ and console/ render typed snapshots and run no
 * SQL and build no Redis key of their own (services do); the console's browser files are real
 * files the type checker and the linter see, served as their own text.
 */
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { OWN_FILES } from "../../src/console/assets.ts";
import { importGraph } from "./imports.ts";

const ROOT = join(import.meta.dir, "../..");
const SRC = join(ROOT, "src");

/** .ts/.tsx files of a src/ folder, relative to src/. */
function filesOf(dir: string): string[] {
  return (readdirSync(join(SRC, dir), { recursive: true }) as string[])
    .filter((f) => /\.tsx?$/.test(f) && !f.endsWith(".d.ts"))
    .map((f) => `${dir}/${f}`);
}

describe("routes/ and console/ are renderings", () => {
  const files = [...filesOf("routes"), ...filesOf("console")];
  const graph = importGraph(SRC);

  test("no SQL: no deps.db / transaction call in routes/ or console/", () => {
    const offenders = files.filter((f) =>
      /\bdb\.(execute|transaction)\(|\.transaction\(/.test(readFileSync(join(SRC, f), "utf8")),
    );
    expect(offenders).toEqual([]);
  });

  test("no Redis key or script of their own: nothing in routes/ or console/ imports redis/keys.ts or redis/scripts.ts", () => {
    const offenders = [
      ...new Set(
        graph
          .filter((e) => files.includes(e.from) && (e.to === "redis/keys.ts" || e.to === "redis/scripts.ts"))
          .map((e) => `${e.from} → ${e.to}`),
      ),
    ].sort();
    expect(offenders).toEqual([]);
  });

  test("the console imports nothing from routes/ (forms, views and the page shell sit below them)", () => {
    expect(
      graph
        .filter((e) => e.from.startsWith("console/") && e.to.startsWith("routes/"))
        .map((e) => `${e.from} → ${e.to}`),
    ).toEqual([]);
  });
});

describe("the console's browser files", () => {
  const dir = join(SRC, "console/assets");
  const own = readdirSync(dir).filter((f) => /\.(js|css)$/.test(f));

  test("are served as their own text (not a path: the text-import trap), one route file per asset file", () => {
    expect(Object.keys(OWN_FILES).sort()).toEqual(own.sort());
    for (const name of own)
      expect([name, OWN_FILES[name as keyof typeof OWN_FILES].body]).toEqual([
        name,
        readFileSync(join(dir, name), "utf8"),
      ]);
  });

  test("every script is type-checked (// @ts-check under allowJs) and linted (biome includes it)", () => {
    const tsconfig = readFileSync(join(ROOT, "tsconfig.json"), "utf8");
    expect(tsconfig).toMatch(/"allowJs":\s*true/);
    const biome = JSON.parse(readFileSync(join(ROOT, "biome.json"), "utf8")) as { files: { includes: string[] } };
    expect(biome.files.includes).toContain("src/console/assets/*.js");
    for (const name of own.filter((f) => f.endsWith(".js"))) {
      expect([name, readFileSync(join(dir, name), "utf8").startsWith("// @ts-check\n")]).toEqual([name, true]);
      // The server sees the script as text: a sibling declaration says so to the checker.
      expect([name, readdirSync(dir).includes(name.replace(/\.js$/, ".d.ts"))]).toEqual([name, true]);
    }
  });
});

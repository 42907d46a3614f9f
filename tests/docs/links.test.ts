/**
 * The repository stands alone: every relative link in its markdown resolves to a file inside it
 * (and every `#anchor` to a heading of that file), every `docs/….md` a comment names exists, and no
 * tracked file refers to the developers' notes outside the checkout. The checker itself is shown to
 * catch a broken link, an escaping link, a missing anchor and an outside path on a throwaway tree.
 */
import { describe, expect, test } from "bun:test";
import { execFileSync } from "node:child_process";
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve, sep } from "node:path";

const ROOT = resolve(import.meta.dir, "../..");
/** Spelled in two parts so this file does not match itself. */
const OUTSIDE = [`../${"shared"}/`, `/work/${"shared"}`, `${"shared"}/docs/`];

/** Files git tracks or would track (untracked but not ignored), regular files only. */
function repoFiles(root: string): string[] {
  const out = execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], {
    cwd: root,
    encoding: "utf8",
  });
  return [...new Set(out.split("\0").filter(Boolean))].filter((f) => {
    const p = join(root, f);
    return existsSync(p) && lstatSync(p).isFile();
  });
}

function text(path: string): string | null {
  const buf = readFileSync(path);
  if (buf.length > 4_000_000 || buf.includes(0)) return null;
  return buf.toString("utf8");
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
export function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  let fenced = false;
  for (const line of markdown.split("\n")) {
    if (line.startsWith("```")) fenced = !fenced;
    const m = fenced ? null : /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m?.[1]) continue;
    const base = m[1]
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** Every problem with the links and paths of the files under `root`. */
export function linkProblems(root: string, files: string[]): string[] {
  const problems: string[] = [];
  for (const f of files) {
    const body = text(join(root, f));
    if (body === null) continue;
    for (const needle of OUTSIDE)
      if (body.includes(needle)) problems.push(`${f}: refers outside the repository (${needle})`);
    for (const m of body.matchAll(/(?<![\w/.])docs\/[\w./-]+\.md/g))
      if (!existsSync(join(root, m[0]))) problems.push(`${f}: names ${m[0]}, which does not exist`);
    if (!f.endsWith(".md")) continue;
    const withoutCode = body.replace(/```[\s\S]*?```/g, "").replace(/`[^`\n]*`/g, "");
    for (const m of withoutCode.matchAll(/\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      const target = m[1] ?? "";
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto: — not a path
      const [path = "", anchor] = target.split("#");
      const resolved = path === "" ? join(root, f) : resolve(join(root, dirname(f)), decodeURIComponent(path));
      const rel = relative(root, resolved);
      if (rel.startsWith("..") || rel.startsWith(sep) || resolve(resolved) === resolve(root, "..")) {
        problems.push(`${f}: link ${target} leaves the repository`);
        continue;
      }
      if (!existsSync(resolved)) {
        problems.push(`${f}: link ${target} → ${rel} does not exist`);
        continue;
      }
      if (anchor && resolved.endsWith(".md") && !anchors(readFileSync(resolved, "utf8")).has(anchor))
        problems.push(`${f}: link ${target}: no heading #${anchor} in ${rel}`);
    }
  }
  return problems;
}

describe("the repository links only to itself", () => {
  test("every relative link, anchor and docs/ path resolves; nothing points outside", () => {
    expect(linkProblems(ROOT, repoFiles(ROOT))).toEqual([]);
  });

  test("the README links to each page of docs/", () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    for (const page of ["architecture", "api", "configuration", "deploying", "operating", "runtimes", "security"])
      expect(readme).toContain(`](docs/${page}.md)`);
    expect(readme).toContain("](docs/decisions/README.md)");
  });

  test("the checker catches broken and escaping links, missing anchors and outside paths", () => {
    const dir = mkdtempSync(join(tmpdir(), "links-"));
    try {
      mkdirSync(join(dir, "pages"));
      writeFileSync(join(dir, "pages/a.md"), "# A page\n\n## Second part\n");
      const files: Record<string, string> = {
        "ok.md": "[a](pages/a.md) [b](pages/a.md#second-part) [c](https://example.com) `[x](nowhere.md)`",
        "broken.md": "[gone](pages/missing.md)",
        "escape.md": "[up](../../etc/passwd)",
        "anchor.md": "[a](pages/a.md#third-part)",
        // Spelled apart so that this file names no missing docs/ page itself.
        "code.ts": `// see ${OUTSIDE[0]}notes.md and ${"docs"}/nothing.md\n`,
      };
      for (const [name, body] of Object.entries(files)) writeFileSync(join(dir, name), body);
      const problems = linkProblems(dir, [...Object.keys(files), "pages/a.md"]);
      const about = (f: string) => problems.filter((p) => p.startsWith(`${f}:`)).length;
      expect(about("ok.md")).toBe(0);
      expect(about("broken.md")).toBe(1);
      expect(about("escape.md")).toBe(1);
      expect(about("anchor.md")).toBe(1);
      expect(about("code.ts")).toBe(2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/**
 * docs/configuration.md is generated from src/env.ts (scripts/gen-config-docs.ts): it must be what
 * the generator renders now, list every setting of EnvSchema with a meaning, and the generator must
 * notice a new setting, a changed default and a missing comment — checked on an edited copy of the source.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { EnvSchema } from "../../src/env.ts";
import { CONFIG_DOC, ENV_SOURCE, readComments, render, settings } from "../../scripts/gen-config-docs.ts";

const doc = readFileSync(CONFIG_DOC, "utf8");

describe("docs/configuration.md", () => {
  test("is up to date with src/env.ts (regenerate with `npm run docs:config`)", () => {
    expect(doc).toBe(render());
  });

  test("has one row per setting, each with a meaning", () => {
    const names = Object.keys(EnvSchema.shape);
    const rows = [...doc.matchAll(/^\| `([A-Z][A-Z0-9_]*)` \|/gm)].map((m) => m[1]);
    expect(rows).toEqual(names);
    const undocumented = settings()
      .filter((s) => s.meaning.trim() === "")
      .map((s) => s.name);
    expect(undocumented).toEqual([]);
  });

  test("states type, default and bounds from the schema", () => {
    const row = (name: string) => doc.split("\n").find((l) => l.startsWith(`| \`${name}\` |`)) ?? "";
    expect(row("ADMIN_TOKEN")).toContain("≥ 32 chars");
    expect(row("ADMIN_TOKEN")).toContain("required");
    expect(row("PORT")).toContain("| `8787` | 0 ≤ x ≤ 65,535 |");
    expect(row("LIMIT_IPV6_PREFIX")).toContain("| `64` | 16 ≤ x ≤ 128 |");
    expect(row("BREAKER_FAILURE_RATIO")).toContain("0 < x ≤ 1");
    expect(row("LOG_LEVEL")).toContain("`debug` \\| `info`");
  });

  test("the comment reader sees a new commented setting and a setting without one", () => {
    const source = readFileSync(ENV_SOURCE, "utf8").replace(
      "export const EnvSchema = z.object({\n",
      "export const EnvSchema = z.object({\n  /** A brand-new knob, ms. */\n  NEW_KNOB_MS: z.coerce.number().default(5),\n  BARE_ONE: z.string().default(''),\n",
    );
    const comments = readComments(source);
    expect(comments.get("NEW_KNOB_MS")).toBe("A brand-new knob, ms.");
    expect(comments.has("BARE_ONE")).toBe(false);
    // The real schema's first setting keeps its own comment after the insertion.
    expect(comments.get("UPSTASH_REDIS_REST_URL")).toContain("Upstash Redis REST endpoint");
  });

  test("a stale document is told apart from a fresh one", () => {
    const list = settings();
    const edited = list.map((s) => (s.name === "PORT" ? { ...s, default: "`9999`" } : s));
    expect(render(edited)).not.toBe(doc);
    expect(render(list.slice(1))).not.toBe(doc);
  });
});

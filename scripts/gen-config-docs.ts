/**
 * `npm run docs:config` — writes docs/configuration.md from src/env.ts: one row per setting of
 * `EnvSchema`, with its type, default and bounds read from the zod schema and its meaning read from
 * the JSDoc comment above it. A setting without a comment of its own shares the comment of the
 * setting before it when both names start with the same word (SECKILL_SHARD_URLS / _TOKENS).
 * tests/docs/config-reference.test.ts fails when the committed file differs from what this renders.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { EnvSchema, MAX_SECKILL_SHARDS } from "../src/env.ts";

const ROOT = join(import.meta.dir, "..");
export const ENV_SOURCE = join(ROOT, "src/env.ts");
export const CONFIG_DOC = join(ROOT, "docs/configuration.md");

export interface Setting {
  name: string;
  type: string;
  required: boolean;
  default: string;
  bounds: string;
  meaning: string;
  /** The setting whose comment this one shares, when it has none of its own. */
  sharesWith?: string;
}

/** The JSDoc comment above each top-level key of `EnvSchema = z.object({ … })`, by key. */
export function readComments(source: string): Map<string, string> {
  const start = source.indexOf("export const EnvSchema = z.object({");
  const end = source.indexOf("\n});", start);
  if (start < 0 || end < 0) throw new Error("src/env.ts: EnvSchema = z.object({ … }) not found");
  const lines = source.slice(start, end).split("\n").slice(1);
  const out = new Map<string, string>();
  let pending: string[] | null = null;
  let inComment = false;
  for (const line of lines) {
    const t = line.trim();
    if (!inComment && t.startsWith("/**")) {
      inComment = true;
      pending = [];
    }
    if (inComment) {
      const text = t
        .replace(/^\/\*\*/, "")
        .replace(/\*\/$/, "")
        .replace(/^\*\s?/, "")
        .trim();
      if (text) pending?.push(text);
      if (t.endsWith("*/")) inComment = false;
      continue;
    }
    const key = /^ {2}([A-Z][A-Z0-9_]*):/.exec(line);
    if (key?.[1]) {
      if (pending) out.set(key[1], pending.join(" "));
      pending = null;
    }
  }
  return out;
}

const fmt = (n: number) => (Number.isInteger(n) && Math.abs(n) >= 10_000 ? n.toLocaleString("en-US") : String(n));

function describeField(name: string, field: z.ZodType, json: Record<string, unknown>) {
  const def = (field as unknown as { _zod: { def: { type: string; defaultValue?: unknown } } })._zod.def;
  const required = def.type !== "default" && def.type !== "optional";
  let type = Array.isArray(json.type) ? "boolean" : String(json.type ?? "string");
  if (json.enum) type = (json.enum as unknown[]).map((v) => `\`${v}\``).join(" \\| ");
  else if (json.format === "uri") type = "URL";
  if (type === "boolean") type = "boolean (`1`/`true`/`yes`/`on`)";
  const bounds: string[] = [];
  const min = json.minimum ?? json.exclusiveMinimum;
  const max = json.maximum;
  if (typeof min === "number" || (typeof max === "number" && max < Number.MAX_SAFE_INTEGER)) {
    const lo = typeof min === "number" ? `${fmt(min)} ${json.exclusiveMinimum !== undefined ? "<" : "≤"} ` : "";
    const hi = typeof max === "number" && max < Number.MAX_SAFE_INTEGER ? ` ≤ ${fmt(max)}` : "";
    bounds.push(`${lo}x${hi}`);
  }
  if (typeof json.minLength === "number") bounds.push(`≥ ${json.minLength} chars`);
  const dflt =
    def.type === "default"
      ? `\`${typeof def.defaultValue === "number" ? fmt(def.defaultValue) : String(def.defaultValue)}\``.replace(
          "``",
          '`""`',
        )
      : required
        ? "— (required)"
        : "— (unset)";
  return { name, type, required, default: dflt, bounds: bounds.join(", ") || "—" };
}

/** Every setting of `EnvSchema`, in source order. */
export function settings(source = readFileSync(ENV_SOURCE, "utf8")): Setting[] {
  const comments = readComments(source);
  const json = z.toJSONSchema(EnvSchema, { io: "input", unrepresentable: "any" }) as {
    properties: Record<string, Record<string, unknown>>;
  };
  const out: Setting[] = [];
  let previous: Setting | undefined;
  for (const [name, field] of Object.entries(EnvSchema.shape)) {
    const base = describeField(name, field as z.ZodType, json.properties[name] ?? {});
    let meaning = comments.get(name) ?? "";
    let sharesWith: string | undefined;
    if (!meaning && previous?.meaning && previous.name.split("_")[0] === name.split("_")[0]) {
      sharesWith = previous.sharesWith ?? previous.name;
      meaning = previous.meaning;
    }
    const s: Setting = { ...base, meaning, sharesWith };
    out.push(s);
    previous = s;
  }
  return out;
}

const cell = (s: string) => s.replace(/\|/g, "\\|").replace(/\s+/g, " ").trim();

/** The whole of docs/configuration.md. */
export function render(list = settings()): string {
  const rows = list.map((s) => {
    const meaning = s.sharesWith ? `See \`${s.sharesWith}\`.` : cell(s.meaning);
    return `| \`${s.name}\` | ${s.type} | ${s.default} | ${s.bounds} | ${meaning} |`;
  });
  return [
    "# Configuration reference",
    "",
    "<!-- Generated from src/env.ts by `npm run docs:config` (scripts/gen-config-docs.ts). Do not edit by hand:",
    "     tests/docs/config-reference.test.ts fails when this file is stale. -->",
    "",
    "Every setting is read once, by [`src/env.ts`](../src/env.ts) (zod), from `process.env` (Bun), the",
    "Worker's bindings (`[vars]` and secrets), or `Deno.env`. An empty value counts as unset. Invalid",
    "configuration stops the Bun or Deno process at boot, listing every problem, and makes a Worker",
    "answer `500 BAD_ENVIRONMENT`. Locally the stack writes its values to `.local/stack.env`.",
    "",
    "Cross-field rules (the `superRefine` in `src/env.ts`): one `SECKILL_SHARD_TOKENS` entry per",
    `\`SECKILL_SHARD_URLS\` entry, at most ${MAX_SECKILL_SHARDS} shards, \`SECKILL_IP_LIMIT\` 0 or at least the shard count;`,
    "`SESSION_TRUST_MS` ≥ 2 × `SESSION_SYNC_MS`; `SESSION_HARD_CAP_SECONDS` ≥ `SESSION_MAX_AGE_SECONDS`;",
    "`SESSION_RENEW_SECONDS` ≤ half of `SESSION_TTL_SECONDS`; `BLOB_STORE=s3` needs the four `S3_*`",
    "credentials and location; `SMS_PROVIDER=twilio` needs the three `TWILIO_*` settings.",
    "",
    `${list.length} settings, ${list.filter((s) => s.required).length} required. Bounds: x is the value; "chars" is a string's length.`,
    "",
    "| setting | type | default | bounds | meaning |",
    "|---|---|---|---|---|",
    ...rows,
    "",
  ].join("\n");
}

if (import.meta.main) {
  writeFileSync(CONFIG_DOC, render());
  console.log(`wrote ${CONFIG_DOC.slice(ROOT.length + 1)} (${settings().length} settings)`);
}

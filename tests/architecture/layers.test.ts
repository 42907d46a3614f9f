/**
 * The architecture test (architecture.md §3): no value import runs up a layer, and the only cycle
 * is the type-only one through `Deps`. Read from the source text of src/ (tests/architecture/imports.ts);
 * the checker itself is shown to catch an upward import, a value cycle, and to let type-only
 * imports and downward ones pass, on a throwaway tree.
 */
import { describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { type Edge, importGraph, placed, upward, valueCycles } from "./imports.ts";

const SRC = join(import.meta.dir, "../../src");
const show = (e: Edge) => `${e.from}:${e.line} → ${e.to}`;

describe("src/ keeps its layers", () => {
  const graph = importGraph(SRC);

  test("the graph is read (hundreds of edges, type-only ones among them)", () => {
    expect(graph.length).toBeGreaterThan(300);
    expect(graph.some((e) => !e.value)).toBe(true);
    expect(graph.some((e) => e.from === "app.ts" && e.value)).toBe(true);
  });

  test("no value import runs up a layer", () => {
    expect(upward(graph).map(show)).toEqual([]);
  });

  test("no value-import cycle", () => {
    expect(valueCycles(graph)).toEqual([]);
  });

  test("the rules the issue names hold: http/ and console/ never import routes/, cache/ never services/, services/ never routes/ or http/", () => {
    const bad = graph.filter(
      (e) =>
        e.value &&
        ((/^(http|console)\//.test(e.from) && e.to.startsWith("routes/")) ||
          (e.from.startsWith("cache/") && e.to.startsWith("services/")) ||
          (e.from.startsWith("services/") && /^(routes|http)\//.test(e.to))),
    );
    expect(bad.map(show)).toEqual([]);
  });

  test("every file of src/ sits in a placed folder or file (a new folder must be given its layer)", () => {
    const files = [...new Set(graph.flatMap((e) => [e.from, e.to]))];
    expect(files.filter((f) => !placed(f))).toEqual([]);
  });
});

describe("the checker", () => {
  function tree(files: Record<string, string>): string {
    const root = mkdtempSync(join(tmpdir(), "arch-"));
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(dirname(join(root, path)), { recursive: true });
      writeFileSync(join(root, path), text);
    }
    return root;
  }

  test("fails on an upward value import added back (cache → services, http → routes, services → isolate.ts), not on a type-only or downward one", () => {
    const root = tree({
      "cache/module.ts":
        'import { loadShop } from "../services/shops.ts";\nimport type { Shop } from "../services/shops.ts";\nimport { type Deps } from "../deps.ts";\n',
      "http/fast-lane.ts": 'import {\n  seckillEnvelope,\n} from "../routes/voucher-order.ts";\n',
      "services/seckill/reserve.ts":
        'import { holderMemoMs } from "../../isolate.ts";\nimport { keys } from "../../redis/keys.ts";\n',
      "services/shops.ts": "export const loadShop = 1;\nexport type Shop = {};\n",
      "routes/voucher-order.ts": "export const seckillEnvelope = 1;\n",
      "isolate.ts": "export const holderMemoMs = 1;\n",
      "deps.ts": "export type Deps = {};\n",
      "redis/keys.ts": "export const keys = {};\n",
    });
    try {
      expect(upward(importGraph(root)).map(show).sort()).toEqual([
        "cache/module.ts:1 → services/shops.ts",
        "http/fast-lane.ts:1 → routes/voucher-order.ts",
        "services/seckill/reserve.ts:1 → isolate.ts",
      ]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  test("fails on a value cycle (blog ↔ feed), not on a cycle of type-only imports", () => {
    const root = tree({
      "services/blog.ts": 'import { pushToFollowers } from "./feed.ts";\nexport const a = 1;\n',
      "services/feed.ts": 'import { a } from "./blog.ts";\nexport const pushToFollowers = a;\n',
      "services/x.ts": 'import type { Y } from "./y.ts";\nexport type X = Y;\n',
      "services/y.ts": 'import type { X } from "./x.ts";\nexport type Y = X;\n',
    });
    try {
      expect(valueCycles(importGraph(root))).toEqual([["services/blog.ts", "services/feed.ts"]]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

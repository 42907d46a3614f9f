/**
 * The cache is a mechanism (architecture.md §3): its loaders, prepared responses and the Redis
 * "degraded" signal are handed in by the composition root (src/caches.ts, src/isolate.ts).
 */
import { expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { keys } from "../../src/redis/keys.ts";

const CACHE_DIR = join(import.meta.dir, "../../src/cache");

test("nothing under src/cache imports a service, a route, the edge, the console or the composition root", () => {
  const offending: string[] = [];
  for (const file of readdirSync(CACHE_DIR)) {
    const src = readFileSync(join(CACHE_DIR, file), "utf8");
    for (const m of src.matchAll(/from\s+"([^"]+)"/g)) {
      const spec = m[1] ?? "";
      if (/\/(services|routes|http|console|jobs)\//.test(spec) || /\.\.\/(caches|isolate|app|errors)\.tsx?$/.test(spec))
        offending.push(`${file}: ${spec}`);
    }
  }
  expect(offending).toEqual([]);
});

test("a cache entry's rebuild lock is the lock.ts key of the entry's name (lock:cache:{<module>:b<n>}:<id>)", () => {
  expect(keys.cacheLock("shop", 42)).toMatch(/^lock:cache:\{shop:b\d+\}:42$/);
  expect(keys.cacheLock("shop", 42)).toBe(keys.lock(keys.cache("shop", 42)));
  expect(keys.cacheLock("voucher-list", 7)).toBe(keys.lock(keys.cache("voucher-list", 7)));
});

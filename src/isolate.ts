/**
 * Everything one isolate (one Worker isolate, one Bun or Deno process) remembers between requests,
 * in one place: built once per isolate by createDeps and reachable as `deps.isolate`. Nothing an
 * isolate remembers hides in module-level maps; a reader sees here what can be stale, for how
 * long, and how big it may grow (each field documents its bound).
 */
import type { Config } from "./env.ts";

// eslint-disable-next-line @typescript-eslint/no-empty-object-type
export interface Isolate {}

export function createIsolate(_config: Config): Isolate {
  return {};
}

/**
 * Access to the per-process test stack, and an app wired to it through the production SDKs.
 */
import { createApp } from "../../src/app.ts";
import { createDeps, type Deps, type DepsOverrides } from "../../src/deps.ts";
import { parseEnv } from "../../src/env.ts";
import { createLogger } from "../../src/log.ts";
import type { Stack } from "../../scripts/stack/index.ts";

export async function getStack(): Promise<Stack> {
  const stack = globalThis.__cityhubStack;
  if (!stack) throw new Error("test stack not started: is tests/support/preload.ts in bunfig.toml [test].preload?");
  return await stack;
}

export interface TestApp {
  stack: Stack;
  deps: Deps;
  app: ReturnType<typeof createApp>;
  /** Background work started through deps.waitUntil; `settle()` awaits it. */
  settle(): Promise<void>;
}

/** A fresh app (own isolate-level state) on the shared stack. `env` overrides config values. */
export async function createTestApp(env: Record<string, string> = {}, overrides: DepsOverrides = {}): Promise<TestApp> {
  const stack = await getStack();
  const pending = new Set<Promise<unknown>>();
  const config = parseEnv({ ...stack.env, LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? "silent", RUN_CRON: "false", ...env });
  const deps = createDeps(config, {
    log: createLogger(config.LOG_LEVEL),
    waitUntil: (p) => {
      const tracked = p.catch(() => {}).finally(() => pending.delete(tracked));
      pending.add(tracked);
    },
    ...overrides,
  });
  return {
    stack,
    deps,
    app: createApp(deps),
    settle: async () => {
      while (pending.size > 0) await Promise.all([...pending]);
    },
  };
}

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

/** Deadlines (ms) for tests that are not about deadlines: see createTestApp. */
export const TEST_DEADLINES = {
  REDIS_TIMEOUT_MS: "10000",
  MYSQL_TIMEOUT_MS: "20000",
  MYSQL_TRANSACTION_TIMEOUT_MS: "20000",
  QSTASH_TIMEOUT_MS: "20000",
  DEADLINE_FLOOR_MS: "10000",
} as const;

/**
 * A fresh app (own isolate-level state) on the shared stack. `env` overrides config values.
 * The seckill admission limit is off unless a test sets SECKILL_ADMISSION_PER_SECOND (`""` = the
 * derived default): it is a budget of the one Redis every test of the process shares, so sales
 * driven at volume by one file would eat into the next file's second.
 */
export async function createTestApp(
  env: Record<string, string> = {},
  overrides: DepsOverrides & { wrap?: (deps: Deps) => Deps } = {},
): Promise<TestApp> {
  const stack = await getStack();
  const pending = new Set<Promise<unknown>>();
  // The listing limit is off unless a test turns it on: in-process tests send every request from
  // one address (tests/support/http.ts) and hammer listing routes (tests/http/listing-limit.test.ts tests it);
  // the public body gate likewise (sign-ins from one address; tests/http/content-types.test.ts tests it).
  // The per-dependency deadlines are widened unless a test sets them (tests/resilience/* do, to test
  // them): the production ones (REDIS_TIMEOUT_MS 250 ms, src/env.ts) are tuned for a dedicated
  // network hop, while here the Upstash/PlanetScale/QStash stand-ins share this process's event loop
  // and two loaded CI cores — a burst of concurrent requests or a busy machine stretches a healthy
  // call past 250 ms, and a test that is not about timeouts would see a 503 (or an opened breaker).
  const config = parseEnv({
    ...stack.env,
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? "silent",
    RUN_CRON: "false",
    LISTING_IP_LIMIT: "0",
    PUBLIC_BODIES_PER_ADDRESS: "0",
    SECKILL_ADMISSION_PER_SECOND: "0",
    // Load shedding is off for tests not about it (tests/http/shed.test.ts): the stand-ins share
    // this event loop, so a busy test would read as an overloaded isolate.
    SHED_MAX_IN_FLIGHT: "0",
    SHED_MAX_LAG_MS: "0",
    ...TEST_DEADLINES,
    ...env,
  });
  const built = createDeps(config, {
    log: createLogger(config.LOG_LEVEL),
    waitUntil: (p) => {
      const tracked = p.catch(() => {}).finally(() => pending.delete(tracked));
      pending.add(tracked);
    },
    ...overrides,
  });
  const deps = overrides.wrap ? overrides.wrap(built) : built;
  return {
    stack,
    deps,
    app: createApp(deps),
    settle: async () => {
      while (pending.size > 0) await Promise.all([...pending]);
    },
  };
}

export interface ServedApp extends TestApp {
  url: string;
  stop(): Promise<void>;
}

/**
 * A test app also served over HTTP on a free port, with PUBLIC_URL pointing at it, so QStash
 * deliveries and payment webhooks reach its /internal routes for real.
 */
export async function serveTestApp(
  env: Record<string, string> = {},
  overrides: DepsOverrides & { wrap?: (deps: Deps) => Deps } = {},
): Promise<ServedApp> {
  const { freePort } = await import("../../scripts/stack/engines.ts");
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const t = await createTestApp({ PUBLIC_URL: url, ...env }, overrides);
  const ctx = { waitUntil: (p: Promise<unknown>) => t.deps.waitUntil(p), passThroughOnException() {}, props: {} };
  const server = Bun.serve({
    port,
    hostname: "127.0.0.1",
    fetch: (req, srv) => t.app.fetch(req, { clientIp: srv.requestIP(req)?.address }, ctx),
  });
  return {
    ...t,
    url,
    stop: async () => {
      await server.stop(true);
    },
  };
}

/** Polls `check` until it returns true or `timeoutMs` passes (then throws with `what`). */
export async function eventually(
  what: string,
  check: () => Promise<boolean>,
  timeoutMs = 20_000,
  everyMs = 50,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await Bun.sleep(everyMs);
  }
}

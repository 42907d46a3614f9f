/**
 * Runtime matrix, the buyer swarm at a distance with the production defaults: the swarm of
 * tests/runtimes/swarm.test.ts (unsharded) — 1,000 seeded buyers × 3 concurrent attempts, at most
 * 200 in flight, on a seckill voucher of 100 units — against an app whose deadlines, breakers and
 * load shedding are src/env.ts's defaults (productionAppEnv: only the per-address limits are off),
 * with every dependency behind a latency proxy (one private stack; `stack.distance.set` moves it
 * before each row starts its runtime). Rows: bun 150 ms away one way (RTT 300 ms), deno near,
 * deno 150 ms away, the Worker in workerd 100 ms away. Must hold on every row: exactly 100 order
 * ids (distinct ids and buyers), no 5xx, none unanswered; the writer drains every acknowledged
 * order into MySQL exactly once; stock conserved; no workerd hazard line in the log. The summary
 * line of each row carries the app's /admin/resilience guards (redis, mysql, qstash) after the
 * drain. RUNTIMES="deno" runs only that runtime's rows; logs of failed runs are kept.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Stack } from "../../scripts/stack/index.ts";
import type { Deps } from "../../src/deps.ts";
import { createDeps } from "../../src/deps.ts";
import { parseEnv } from "../../src/env.ts";
import { createLogger } from "../../src/log.ts";
import { within } from "../support/child.ts";
import {
  guardedBy,
  productionAppEnv,
  type RuntimeName,
  type RuntimeServer,
  request,
  seedBuyers,
  selectedRuntimes,
  stackAppEnv,
  startPrivateStack,
  startRuntime,
  workerBundle,
} from "../support/runtimes.ts";
import {
  type Buyer,
  createSaleOverHttp,
  runSwarm,
  type SaleSwarm,
  swarmCheckTests,
  swarmFigures,
} from "../support/sale-checks.ts";

const USERS = 1_000;
const ATTEMPTS_PER_USER = 3;
/** Below Bun's 256 fetches per process: the latency proxies run in this process and forward with fetch. */
const CONNECTIONS = 200;
const UNITS = 100;
const REQUEST_TIMEOUT_MS = 20_000;
const SWARM_TIMEOUT_MS = 120_000;
const DRAIN_TIMEOUT_MS = 90_000;

/** One row: a runtime with every dependency `oneWayMs` away (each call ≈ 2 × oneWayMs more). */
const ROWS: { name: RuntimeName; oneWayMs: number }[] = [
  { name: "bun", oneWayMs: 150 },
  { name: "deno", oneWayMs: 0 },
  { name: "deno", oneWayMs: 150 },
  { name: "workerd", oneWayMs: 100 },
];
const rows = ROWS.filter((r) => selectedRuntimes().includes(r.name));

let dir = "";
let stack: Stack | undefined;
let buyers: Buyer[] = [];
let failed = false;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "cityhub-matrix-distance-swarm-"));
  // Started far (the latency proxies exist only then); the buyers are seeded straight at the
  // stand-ins, past the proxies: seedBuyers writes 500 sessions at once, and more than 256 fetches
  // in flight from this process (Bun's default pool, which the in-process proxies' forwards share)
  // would leave the forwards waiting behind the very calls they serve. The seeder is the test's own
  // client (widened deadlines).
  stack = await startPrivateStack(join(dir, "stack"), { distance: { oneWayMs: 150 } });
  const near = {
    UPSTASH_REDIS_REST_URL: stack.rest.url,
    DATABASE_URL: stack.planetscale.url,
    QSTASH_URL: stack.qstash.url,
    LOG_LEVEL: "silent",
  };
  const seeder = createDeps(parseEnv(stackAppEnv(stack, near)), { log: createLogger("silent") });
  const [seeded] = await Promise.all([
    within(60_000, "seeding 1,000 buyers", seedBuyers(seeder, USERS)),
    rows.some((r) => r.name === "workerd") ? workerBundle(dir) : undefined,
  ]);
  buyers = seeded;
}, 150_000);

afterAll(async () => {
  await stack?.stop();
  if (failed || process.env.MATRIX_KEEP_DIR) console.error(`runtime matrix (distance swarm): logs kept in ${dir}`);
  else if (dir) rmSync(dir, { recursive: true, force: true });
}, 30_000);

/** What the summary line shows of each guard (src/resilience.ts GuardSnapshot). */
const GUARD_FIELDS = "state timeoutMs p99Ms calls failures timeouts queued extended rejected opened".split(" ");

/** The app's redis/mysql/qstash guards from GET /admin/resilience, one compact field each. */
async function guardsOf(s: RuntimeServer): Promise<string> {
  const res = await request<Record<string, Record<string, unknown>>>(s.url, "GET", "/admin/resilience", {
    token: `Bearer ${s.env.ADMIN_TOKEN}`,
    timeoutMs: 10_000,
  });
  const data = res.body?.data;
  if (res.status !== 200 || !data) return `resilience=unavailable(${res.status} ${res.error ?? ""})`;
  return ["redis", "mysql", "qstash"]
    .map((d) => {
      const g = data[d] ?? {};
      return `${d}={${GUARD_FIELDS.map((f) => `${f}:${JSON.stringify(g[f])}`).join(",")}}`;
    })
    .join(" ");
}

describe.each(rows.map((r) => [r.name, r.oneWayMs] as const))(
  "runtime matrix: the buyer swarm on %s, every dependency %d ms away one way (production defaults)",
  (name, oneWayMs) => {
    let server: RuntimeServer | undefined;
    let result: SaleSwarm | undefined;

    const guarded = guardedBy(
      name,
      () => server,
      () => {
        failed = true;
      },
    );
    const requireResult = (): SaleSwarm => {
      if (!result) throw new Error(`the swarm on ${name} did not run (see the first test's failure)`);
      return result;
    };

    beforeAll(async () => {
      const st = stack as Stack;
      st.distance?.set({ oneWayMs });
      server = await startRuntime(name, { dir, env: productionAppEnv(st) });
    }, 90_000);

    afterAll(async () => {
      await server?.stop();
    }, 20_000);

    test(
      `${USERS} buyers × ${ATTEMPTS_PER_USER} concurrent attempts at ${CONNECTIONS} in flight on ${UNITS} units, RTT ${2 * oneWayMs} ms: the sale runs and the writer drains`,
      guarded(async () => {
        const s = server as RuntimeServer;
        const deps: Deps = s.driver();
        const { shopId, voucherId } = await within(
          30_000,
          "creating the sale",
          createSaleOverHttp(s.url, deps, { units: UNITS, label: `dswarm-${name}-${oneWayMs}`, timeoutMs: 20_000 }),
        );
        const logMark = s.logSize();
        const swarm = await runSwarm(s.url, deps, { shopId, voucherId }, buyers, {
          attemptsPerUser: ATTEMPTS_PER_USER,
          connections: CONNECTIONS,
          requestTimeoutMs: REQUEST_TIMEOUT_MS,
          swarmTimeoutMs: SWARM_TIMEOUT_MS,
          drainTimeoutMs: DRAIN_TIMEOUT_MS,
          drainPollMs: 250,
        });
        result = { shopId, voucherId, logMark, ...swarm };
        console.log(
          `matrix distance swarm ${name} (RTT ${2 * oneWayMs} ms, production defaults): ${swarmFigures(swarm)} ${await guardsOf(s)}`,
        );
        expect(swarm.attempts.length).toBe(buyers.length * ATTEMPTS_PER_USER);
      }),
      SWARM_TIMEOUT_MS + DRAIN_TIMEOUT_MS + 60_000,
    );

    swarmCheckTests({
      units: UNITS,
      server: "runtime",
      guarded,
      swarm: requireResult,
      driver: () => (server as RuntimeServer).driver(),
      logSince: (mark) => (server as RuntimeServer).logSince(mark),
    });
  },
);

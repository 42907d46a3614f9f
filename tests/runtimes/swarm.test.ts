/**
 * Runtime matrix, the buyer swarm (issue 15 item 4): on Bun, on Deno and on the built Worker in
 * workerd — each a real HTTP server on the test stack (tests/support/runtimes.ts) — 1,000 seeded
 * buyers send 3 concurrent attempts each, at most 200 requests in flight, at a seckill voucher of
 * 100 units. Must hold on every runtime:
 *
 *   - exactly 100 attempts are answered with an order id (100 distinct ids, 100 distinct buyers),
 *     none with a 5xx, none left without an answer;
 *   - the writer drains through QStash (deliveries to the runtime's own drain route, ORDER_DRAIN_PATH):
 *     every acknowledged order is in MySQL exactly once with its buyer, and no buyer holds an order
 *     they were told they do not have;
 *   - stock is conserved: MySQL stock + active orders = 100 = Redis stock + buyers, buyers = orders;
 *   - the runtime's log has none of workerd's cross-request reports ("different request context",
 *     "hung", "canceled").
 *
 * The workerd row failed before issue 15's item 1 (9 of 100 units acknowledged, ~1,450 5xx,
 * "A promise was resolved or rejected from a different request context" at ScriptBatcher.flush).
 * Run one runtime with RUNTIMES=workerd; logs of failed runs are kept (the path is printed).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Deps } from "../../src/deps.ts";
import { homeShard } from "../../src/services/seckill/shards.ts";
import { within } from "../support/child.ts";
import {
  guardedBy,
  type RuntimeServer,
  seedBuyers,
  selectedRuntimes,
  stackAppEnv,
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
import { getShardStack } from "../support/shards.ts";
import { getStack } from "../support/stack.ts";
import { retireVouchers } from "../support/seckill.ts";

const USERS = 1_000;
const ATTEMPTS_PER_USER = 3;
const CONNECTIONS = 200;
const UNITS = 100;
const REQUEST_TIMEOUT_MS = 15_000;
const SWARM_TIMEOUT_MS = 120_000;
const DRAIN_TIMEOUT_MS = 45_000;

let dir = "";
let buyers: Buyer[] = [];
let failed = false;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "cityhub-matrix-swarm-"));
  const stack = await getStack();
  const { createDeps } = await import("../../src/deps.ts");
  const { parseEnv } = await import("../../src/env.ts");
  const { createLogger } = await import("../../src/log.ts");
  const seeder = createDeps(parseEnv(stackAppEnv(stack, { LOG_LEVEL: "silent" })), { log: createLogger("silent") });
  // The bundle is built while the buyers are seeded (only the workerd row needs it).
  const [seeded] = await Promise.all([
    within(60_000, "seeding 1,000 buyers", seedBuyers(seeder, USERS)),
    selectedRuntimes().includes("workerd") ? workerBundle(dir) : undefined,
  ]);
  buyers = seeded;
}, 120_000);

afterAll(() => {
  if (failed || process.env.MATRIX_KEEP_DIR) console.error(`runtime matrix (swarm): logs kept in ${dir}`);
  else if (dir) rmSync(dir, { recursive: true, force: true });
});

/**
 * The same swarm on a voucher sharded over SHARDS databases with every buyer homed on one shard:
 * the home shard runs dry at once and the rest of the stock must come to it by moves
 * (src/services/seckill/moves.ts) — the refill gates and move counters are isolate state shared
 * by concurrent requests, which on workerd must not await each other's I/O.
 */
const SHARDS = 4;
type Mode = "unsharded" | "sharded, one home";
const MODES: Mode[] = ["unsharded", "sharded, one home"];
const shardedVouchers: number[] = [];
let retireWith: Deps | undefined;

afterAll(async () => {
  // Later test files of this process may run jobs on apps without these shards.
  if (retireWith) await retireVouchers(retireWith, shardedVouchers);
});

describe.each(MODES.flatMap((mode) => selectedRuntimes().map((name) => [name, mode] as const)))(
  "runtime matrix: the buyer swarm on %s (%s)",
  (name, mode) => {
    let server: RuntimeServer | undefined;
    let result: SaleSwarm | undefined;
    const sharded = mode !== "unsharded";
    const crowdOf = () => (sharded ? buyers.filter((b) => homeShard(b.userId, SHARDS) === 0) : buyers);

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
      const shardEnv = sharded ? (await getShardStack(SHARDS)).env : {};
      server = await startRuntime(name, { dir, env: stackAppEnv(await getStack(), shardEnv) });
    }, 90_000);

    afterAll(async () => {
      await server?.stop();
    }, 20_000);

    test(
      `${sharded ? "the buyers homed on one of 4 shards" : `${USERS} buyers`} × ${ATTEMPTS_PER_USER} concurrent attempts at ${CONNECTIONS} in flight on ${UNITS} units: the sale runs and the writer drains`,
      guarded(async () => {
        const s = server as RuntimeServer;
        const deps: Deps = s.driver();
        const { shopId, voucherId } = await within(
          20_000,
          "creating the sale",
          createSaleOverHttp(s.url, deps, { units: UNITS, label: `swarm-${name}${sharded ? "-sharded" : ""}` }),
        );
        if (sharded) {
          shardedVouchers.push(voucherId);
          retireWith ??= deps;
        }
        const crowdBuyers = crowdOf();
        const logMark = s.logSize();
        const swarm = await runSwarm(s.url, deps, { shopId, voucherId }, crowdBuyers, {
          attemptsPerUser: ATTEMPTS_PER_USER,
          connections: CONNECTIONS,
          requestTimeoutMs: REQUEST_TIMEOUT_MS,
          swarmTimeoutMs: SWARM_TIMEOUT_MS,
          drainTimeoutMs: DRAIN_TIMEOUT_MS,
        });
        result = { shopId, voucherId, logMark, ...swarm };
        console.log(`matrix swarm ${name} (${mode}): ${swarmFigures(swarm)}`);
        expect(swarm.attempts.length).toBe(crowdBuyers.length * ATTEMPTS_PER_USER);
        if (sharded) expect(crowdBuyers.length).toBeGreaterThan(UNITS);
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

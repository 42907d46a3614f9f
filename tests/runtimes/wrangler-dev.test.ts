/**
 * The buyer swarm of the runtime matrix (tests/runtimes/swarm.test.ts) against the Worker as users
 * run it: `npm run worker` (tests/support/wrangler-dev.ts: its own stack, `wrangler dev` serving
 * src/entry/worker.ts in workerd, the cron on its schedule) with DEFAULT settings. 1,000 seeded
 * buyers send 3 concurrent attempts each, at most 200 in flight, at a seckill voucher of 100 units:
 *
 *   - exactly 100 attempts are answered with an order id (distinct ids, distinct buyers), no 5xx,
 *     none left without an answer;
 *   - the writer drains through QStash into MySQL: every acknowledged order is there once with its
 *     buyer, and no buyer holds an order they were told they lack;
 *   - stock is conserved in MySQL and Redis; the Worker logged no cross-request report.
 *
 * Only the per-address limits are off (`--var`), as in the matrix: every request comes from one
 * address. The deadlines and breakers are the production defaults — that is the point of the file.
 * One row per dependency distance (DISTANCES below). Logs of a failed run are kept (path printed).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { within } from "../support/child.ts";
import { seedBuyers } from "../support/runtimes.ts";
import {
  type Buyer,
  createSaleOverHttp,
  runSwarm,
  type SaleSwarm,
  swarmCheckTests,
  swarmFigures,
} from "../support/sale-checks.ts";
import { type Distance, LOCAL, startWranglerDev, type WranglerDev } from "../support/wrangler-dev.ts";

const USERS = 1_000;
const ATTEMPTS_PER_USER = 3;
const CONNECTIONS = 200;
const UNITS = 100;
const REQUEST_TIMEOUT_MS = 15_000;
const SWARM_TIMEOUT_MS = 90_000;
const DRAIN_TIMEOUT_MS = 45_000;

/** The rows, one per distance of every dependency (Redis REST, PlanetScale HTTP, QStash) from the Worker. */
const DISTANCES: Distance[] = [LOCAL, { label: "every dependency 100 ms away one way", oneWayMs: 100 }];

/** Only the per-address limits are off (one client address); everything else is the default. */
const ONE_ADDRESS_VARS = { SECKILL_IP_LIMIT: "0", LISTING_IP_LIMIT: "0", LOGIN_CODE_SENDS_PER_IP_HOUR: "100000" };

describe.each(DISTANCES.map((d) => [d.label, d] as const))(
  "npm run worker (wrangler dev), default settings, %s: the buyer swarm",
  (label, distance) => {
    let dir = "";
    let worker: WranglerDev | undefined;
    let buyers: Buyer[] = [];
    let result: SaleSwarm | undefined;
    let failed = false;

    const guarded = (fn: () => Promise<void>) => async () => {
      try {
        await fn();
      } catch (err) {
        failed = true;
        if (err instanceof Error && worker)
          err.message += `\n--- worker log tail (${worker.logFile}) ---\n${worker.logTail()}`;
        throw err;
      }
    };
    const requireResult = (): SaleSwarm => {
      if (!result) throw new Error(`the swarm (${label}) did not run (see the first test's failure)`);
      return result;
    };

    beforeAll(async () => {
      dir = mkdtempSync(join(tmpdir(), "cityhub-wrangler-dev-swarm-"));
      try {
        worker = await startWranglerDev({ dir, vars: ONE_ADDRESS_VARS, distance });
        buyers = await within(60_000, "seeding 1,000 buyers", seedBuyers(worker.driver(), USERS));
      } catch (err) {
        failed = true;
        throw err;
      }
    }, 240_000);

    afterAll(async () => {
      await worker?.stop();
      if (failed || process.env.MATRIX_KEEP_DIR) console.error(`wrangler dev swarm (${label}): logs kept in ${dir}`);
      else if (dir) rmSync(dir, { recursive: true, force: true });
    }, 60_000);

    test(
      `${USERS} buyers × ${ATTEMPTS_PER_USER} concurrent attempts at ${CONNECTIONS} in flight on ${UNITS} units: the sale runs and the writer drains`,
      guarded(async () => {
        const w = worker as WranglerDev;
        const deps = w.driver();
        const { shopId, voucherId } = await within(
          20_000,
          "creating the sale",
          createSaleOverHttp(w.url, deps, { units: UNITS, label: "swarm-wrangler-dev" }),
        );
        const logMark = w.logSize();
        const swarm = await runSwarm(w.url, deps, { shopId, voucherId }, buyers, {
          attemptsPerUser: ATTEMPTS_PER_USER,
          connections: CONNECTIONS,
          requestTimeoutMs: REQUEST_TIMEOUT_MS,
          swarmTimeoutMs: SWARM_TIMEOUT_MS,
          drainTimeoutMs: DRAIN_TIMEOUT_MS,
        });
        result = { shopId, voucherId, logMark, ...swarm };
        console.log(`wrangler dev swarm (${label}): ${swarmFigures(swarm)}`);
        expect(swarm.attempts.length).toBe(USERS * ATTEMPTS_PER_USER);
      }),
      SWARM_TIMEOUT_MS + DRAIN_TIMEOUT_MS + 30_000,
    );

    swarmCheckTests({
      units: UNITS,
      server: "Worker",
      guarded,
      swarm: requireResult,
      driver: () => (worker as WranglerDev).driver(),
      logSince: (mark) => (worker as WranglerDev).logSince(mark),
    });
  },
);

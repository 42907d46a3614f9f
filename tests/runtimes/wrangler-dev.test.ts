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
import { pollUntil, within } from "../support/child.ts";
import { hazardLines, limiter, seedBuyers } from "../support/runtimes.ts";
import {
  type Attempt,
  type Buyer,
  buy,
  createSaleOverHttp,
  expectEveryOrderOnce,
  expectStockConserved,
  mysqlOrderCount,
  orderFindings,
  outboxSize,
  redisSide,
  stockFindings,
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

interface SwarmResult {
  shopId: number;
  voucherId: number;
  attempts: Attempt[];
  redisAfterSale: { stock: number; buyers: number };
  drained: boolean;
  drainNote: string;
  logMark: number;
}

describe.each(DISTANCES.map((d) => [d.label, d] as const))(
  "npm run worker (wrangler dev), default settings, %s: the buyer swarm",
  (label, distance) => {
    let dir = "";
    let worker: WranglerDev | undefined;
    let buyers: Buyer[] = [];
    let result: SwarmResult | undefined;
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
    const requireResult = (): SwarmResult => {
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
        const run = limiter(CONNECTIONS);
        const stopAll = new AbortController();
        const attempts: Attempt[] = [];
        const started = performance.now();
        // Each buyer's attempts are queued next to each other, so they are in flight together.
        const crowd = buyers.flatMap((buyer) =>
          Array.from({ length: ATTEMPTS_PER_USER }, () =>
            run(async () => {
              attempts.push({
                buyer,
                outcome: await buy(w.url, voucherId, buyer, { timeoutMs: REQUEST_TIMEOUT_MS, signal: stopAll.signal }),
              });
            }),
          ),
        );
        try {
          await within(SWARM_TIMEOUT_MS, "the swarm", Promise.all(crowd));
        } finally {
          stopAll.abort(); // whatever is still in flight past the deadline is answered "lost"
          await Promise.allSettled(crowd);
        }
        const saleMs = Math.round(performance.now() - started);
        const redisAfterSale = await within(5_000, "reading Redis stock", redisSide(deps, shopId, voucherId));

        let drained = true;
        let drainNote = "";
        await pollUntil(
          "the writer to drain: outbox empty and one MySQL row per Redis buyer",
          async () => {
            const [outbox, rows, { buyers: taken }] = await Promise.all([
              outboxSize(deps, shopId),
              mysqlOrderCount(deps, voucherId),
              redisSide(deps, shopId, voucherId),
            ]);
            drainNote = `outbox=${outbox} mysqlRows=${rows} redisBuyers=${taken}`;
            return outbox === 0 && rows === taken;
          },
          DRAIN_TIMEOUT_MS,
          100,
        ).catch(() => {
          drained = false;
        });
        result = { shopId, voucherId, attempts, redisAfterSale, drained, drainNote, logMark };

        const count = (k: Attempt["outcome"]["kind"]) => attempts.filter((a) => a.outcome.kind === k).length;
        const codes = new Map<string, number>();
        for (const { outcome: o } of attempts) {
          const key =
            o.kind === "ack"
              ? "ack"
              : o.kind === "rejected"
                ? `${o.status}:${o.code}`
                : o.kind === "error"
                  ? `${o.status}${o.code ? `:${o.code}` : ""}`
                  : "lost";
          codes.set(key, (codes.get(key) ?? 0) + 1);
        }
        console.log(
          `wrangler dev swarm (${label}): attempts=${attempts.length} acks=${count("ack")} rejected=${count("rejected")} 5xx=${count("error")} lost=${count("lost")} ` +
            `saleMs=${saleMs} redisAfterSale=${JSON.stringify(redisAfterSale)} drained=${drained} (${drainNote}) answers=${JSON.stringify(Object.fromEntries(codes))}`,
        );
        expect(attempts.length).toBe(USERS * ATTEMPTS_PER_USER);
      }),
      SWARM_TIMEOUT_MS + DRAIN_TIMEOUT_MS + 30_000,
    );

    test(
      `exactly ${UNITS} attempts answered with an order id (distinct ids, distinct buyers), no 5xx, none unanswered`,
      guarded(async () => {
        const { attempts } = requireResult();
        const acks = attempts.flatMap((a) =>
          a.outcome.kind === "ack" ? [{ orderId: a.outcome.orderId, userId: a.buyer.userId }] : [],
        );
        const fiveXX = attempts.filter((a) => a.outcome.kind === "error");
        const lost = attempts.filter((a) => a.outcome.kind === "lost");
        expect({
          acknowledged: acks.length,
          distinctOrderIds: new Set(acks.map((a) => a.orderId)).size,
          distinctBuyers: new Set(acks.map((a) => a.userId)).size,
          "5xx": fiveXX.length,
          unanswered: lost.length,
          firstErrors: [...fiveXX, ...lost].slice(0, 3).map((a) => JSON.stringify(a.outcome)),
        }).toEqual({
          acknowledged: UNITS,
          distinctOrderIds: UNITS,
          distinctBuyers: UNITS,
          "5xx": 0,
          unanswered: 0,
          firstErrors: [],
        });
      }),
      10_000,
    );

    test(
      "every acknowledged order is in MySQL exactly once with its buyer (drained via QStash); no buyer holds an order they were told they lack",
      guarded(async () => {
        const r = requireResult();
        const found = await orderFindings((worker as WranglerDev).driver(), r.voucherId, r.attempts);
        expect({ drained: r.drained, drainNote: r.drained ? "" : r.drainNote }).toEqual({
          drained: true,
          drainNote: "",
        });
        expectEveryOrderOnce(found, UNITS);
      }),
      30_000,
    );

    test(
      "stock is conserved in MySQL and in Redis, and the Redis buyers are exactly the users with orders",
      guarded(async () => {
        const r = requireResult();
        const st = await stockFindings((worker as WranglerDev).driver(), r.shopId, r.voucherId);
        expect(r.redisAfterSale.stock + r.redisAfterSale.buyers).toBe(UNITS);
        expectStockConserved(st, UNITS);
      }),
      30_000,
    );

    test(
      'the Worker logged no "different request context", "hung" or "canceled" report during the sale',
      guarded(async () => {
        const r = requireResult();
        const lines = hazardLines((worker as WranglerDev).logSince(r.logMark));
        expect({ count: lines.length, first: lines.slice(0, 3).map((l) => l.slice(0, 300)) }).toEqual({
          count: 0,
          first: [],
        });
      }),
      10_000,
    );
  },
);

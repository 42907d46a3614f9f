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
import { pollUntil, within } from "../support/child.ts";
import {
  hazardLines,
  limiter,
  type RuntimeServer,
  seedBuyers,
  selectedRuntimes,
  stackAppEnv,
  startRuntime,
  guardedBy,
  workerBundle,
} from "../support/runtimes.ts";
import {
  type Attempt,
  buy,
  type Buyer,
  createSaleOverHttp,
  expectEveryOrderOnce,
  expectStockConserved,
  mysqlOrderCount,
  orderFindings,
  outboxSize,
  redisSide,
  stockFindings,
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

interface SwarmResult {
  shopId: number;
  voucherId: number;
  attempts: Attempt[];
  redisAfterSale: { stock: number; buyers: number };
  drained: boolean;
  drainNote: string;
  logMark: number;
  saleMs: number;
}

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
    let result: SwarmResult | undefined;
    const sharded = mode !== "unsharded";
    const crowdOf = () => (sharded ? buyers.filter((b) => homeShard(b.userId, SHARDS) === 0) : buyers);

    const guarded = guardedBy(
      name,
      () => server,
      () => {
        failed = true;
      },
    );
    const requireResult = (): SwarmResult => {
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
        const run = limiter(CONNECTIONS);
        const stopAll = new AbortController();
        const attempts: Attempt[] = [];
        const started = performance.now();
        // Each buyer's attempts are queued next to each other, so they are in flight together.
        const crowd = crowdBuyers.flatMap((buyer) =>
          Array.from({ length: ATTEMPTS_PER_USER }, () =>
            run(async () => {
              attempts.push({
                buyer,
                outcome: await buy(s.url, voucherId, buyer, { timeoutMs: REQUEST_TIMEOUT_MS, signal: stopAll.signal }),
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

        // The writer drains through QStash into MySQL: every unit taken in Redis becomes a row.
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
        result = { shopId, voucherId, attempts, redisAfterSale, drained, drainNote, logMark, saleMs };

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
          `matrix swarm ${name} (${mode}): attempts=${attempts.length} acks=${count("ack")} rejected=${count("rejected")} 5xx=${count("error")} lost=${count("lost")} ` +
            `saleMs=${saleMs} redisAfterSale=${JSON.stringify(redisAfterSale)} drained=${drained} (${drainNote}) answers=${JSON.stringify(Object.fromEntries(codes))}`,
        );
        expect(attempts.length).toBe(crowdBuyers.length * ATTEMPTS_PER_USER);
        if (sharded) expect(crowdBuyers.length).toBeGreaterThan(UNITS);
      }),
      SWARM_TIMEOUT_MS + DRAIN_TIMEOUT_MS + 60_000,
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
        const firstErrors = [...fiveXX, ...lost].slice(0, 3).map((a) => JSON.stringify(a.outcome));
        expect({
          acknowledged: acks.length,
          distinctOrderIds: new Set(acks.map((a) => a.orderId)).size,
          distinctBuyers: new Set(acks.map((a) => a.userId)).size,
          "5xx": fiveXX.length,
          unanswered: lost.length,
          firstErrors,
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
        const deps = (server as RuntimeServer).driver();
        const found = await orderFindings(deps, r.voucherId, r.attempts);
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
        const st = await stockFindings((server as RuntimeServer).driver(), r.shopId, r.voucherId);
        expect(r.redisAfterSale.stock + r.redisAfterSale.buyers).toBe(UNITS);
        expectStockConserved(st, UNITS);
      }),
      30_000,
    );

    test(
      'the runtime logged no "different request context", "hung" or "canceled" report during the sale',
      guarded(async () => {
        const r = requireResult();
        const lines = hazardLines((server as RuntimeServer).logSince(r.logMark));
        expect({ count: lines.length, first: lines.slice(0, 3).map((l) => l.slice(0, 300)) }).toEqual({
          count: 0,
          first: [],
        });
      }),
      10_000,
    );
  },
);

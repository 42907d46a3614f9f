/**
 * Runtime matrix: sharded sales where every buyer is homed on one shard, each buyer with 3
 * concurrent attempts, sell exactly the stock — 10 small sales in a row on each runtime (Bun, Deno,
 * the built Worker in workerd), alternately 20 and 40 units over 4 shards, ~100 buyers, at most 50
 * requests in flight. The home shard runs dry at once, so most units reach the buyers through
 * refills (src/services/seckill/moves.ts) and the retries after them (reserve.ts), where one
 * buyer's concurrent attempts compete for the same tickets: an undersell (a unit left while
 * buyers were told SOLD_OUT) shows as fewer acknowledgements than units. Per sale: exactly the
 * stock acknowledged, to distinct buyers, no 5xx, none unanswered, Redis stock 0 and buyers = stock.
 * Run one runtime with RUNTIMES=workerd.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { homeShard } from "../../src/services/seckill/shards.ts";
import { within } from "../support/child.ts";
import {
  guardedBy,
  limiter,
  type RuntimeServer,
  seedBuyers,
  selectedRuntimes,
  stackAppEnv,
  startRuntime,
  workerBundle,
} from "../support/runtimes.ts";
import { type Attempt, buy, type Buyer, createSaleOverHttp, redisSide } from "../support/sale-checks.ts";
import { retireVouchers } from "../support/seckill.ts";
import { getShardStack } from "../support/shards.ts";
import { getStack } from "../support/stack.ts";

const SHARDS = 4;
const SALES = 10;
const UNITS = [20, 40] as const;
const SEEDED = 400; // ~100 of them homed on shard 0
const ATTEMPTS_PER_USER = 3;
const CONNECTIONS = 50;
const REQUEST_TIMEOUT_MS = 15_000;

let dir = "";
let buyers: Buyer[] = [];
let failed = false;
const created: number[] = [];
let retireWith: RuntimeServer | undefined;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "cityhub-matrix-one-home-"));
  const stack = await getStack();
  const { createDeps } = await import("../../src/deps.ts");
  const { parseEnv } = await import("../../src/env.ts");
  const { createLogger } = await import("../../src/log.ts");
  const seeder = createDeps(parseEnv(stackAppEnv(stack, { LOG_LEVEL: "silent" })), { log: createLogger("silent") });
  const [seeded] = await Promise.all([
    within(60_000, "seeding buyers", seedBuyers(seeder, SEEDED)),
    selectedRuntimes().includes("workerd") ? workerBundle(dir) : undefined,
  ]);
  buyers = seeded.filter((b) => homeShard(b.userId, SHARDS) === 0);
}, 120_000);

afterAll(async () => {
  if (retireWith) await retireVouchers(retireWith.driver(), created);
  if (failed || process.env.MATRIX_KEEP_DIR) console.error(`runtime matrix (one home): logs kept in ${dir}`);
  else if (dir) rmSync(dir, { recursive: true, force: true });
});

describe.each(selectedRuntimes())(
  "runtime matrix: sharded sales with every buyer homed on one shard, on %s",
  (name) => {
    let server: RuntimeServer | undefined;
    const guarded = guardedBy(
      name,
      () => server,
      () => {
        failed = true;
      },
    );

    beforeAll(async () => {
      server = await startRuntime(name, { dir, env: stackAppEnv(await getStack(), (await getShardStack(SHARDS)).env) });
      retireWith ??= server;
    }, 90_000);

    afterAll(async () => {
      await server?.stop();
    }, 20_000);

    test(
      `${SALES} sales in a row (${UNITS.join(" and ")} units over ${SHARDS} shards), ~100 buyers × ${ATTEMPTS_PER_USER} concurrent attempts: each sells exactly its stock`,
      guarded(async () => {
        const s = server as RuntimeServer;
        const deps = s.driver();
        expect(buyers.length).toBeGreaterThan(2 * Math.max(...UNITS));
        const rows: string[] = [];
        const results: { sale: number; units: number; acks: number; buyers: number; bad: number; redis: string }[] = [];
        for (let sale = 0; sale < SALES; sale++) {
          const units = UNITS[sale % UNITS.length] as number;
          const { shopId, voucherId } = await within(
            20_000,
            "creating the sale",
            createSaleOverHttp(s.url, deps, { units, label: `one-home-${name}` }),
          );
          created.push(voucherId);
          const run = limiter(CONNECTIONS);
          const attempts: Attempt[] = [];
          // Each buyer's attempts are queued next to each other, so they are in flight together.
          await within(
            60_000,
            `sale ${sale + 1}`,
            Promise.all(
              buyers.flatMap((buyer) =>
                Array.from({ length: ATTEMPTS_PER_USER }, () =>
                  run(async () => {
                    attempts.push({
                      buyer,
                      outcome: await buy(s.url, voucherId, buyer, { timeoutMs: REQUEST_TIMEOUT_MS }),
                    });
                  }),
                ),
              ),
            ),
          );
          const acks = attempts.filter((a) => a.outcome.kind === "ack");
          const bad = attempts.filter((a) => a.outcome.kind === "error" || a.outcome.kind === "lost");
          const side = await redisSide(deps, shopId, voucherId);
          const codes = new Map<string, number>();
          for (const { outcome: o } of attempts) {
            const key = o.kind === "rejected" ? o.code : o.kind;
            codes.set(key, (codes.get(key) ?? 0) + 1);
          }
          rows.push(
            `sale ${sale + 1}: ${units} units ${JSON.stringify(Object.fromEntries(codes))} redis=${JSON.stringify(side)}`,
          );
          results.push({
            sale: sale + 1,
            units,
            acks: acks.length,
            buyers: new Set(acks.map((a) => a.buyer.userId)).size,
            bad: bad.length,
            redis: `stock=${side.stock} buyers=${side.buyers}`,
          });
        }
        console.log(`matrix one-home ${name}:\n  ${rows.join("\n  ")}`);
        expect(results).toEqual(
          results.map((r) => ({ ...r, acks: r.units, buyers: r.units, bad: 0, redis: `stock=0 buyers=${r.units}` })),
        );
      }),
      SALES * 70_000,
    );
  },
);

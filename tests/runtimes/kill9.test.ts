/**
 * Runtime matrix, kill -9 mid-sale (issue 15 item 4): on Bun, Deno and the built Worker in workerd
 * (tests/support/runtimes.ts), the process that runs the app — bun, deno, or workerd itself — is
 * killed with SIGKILL while a sale's requests are in flight, and started again on the same port
 * (PUBLIC_URL and QStash's destinations stay valid). Buyers keep arriving; one whose request got
 * no answer (or a 5xx) tries again, as clients do. Then the order pipeline is settled through the
 * runtime's own cron (workerd: its scheduled event; Bun/Deno: the same jobs from this process, their
 * drains delivered to the runtime's /internal/*), and the checks of the chaos test
 * (tests/support/sale-checks.ts) must hold: every acknowledged order in MySQL exactly once with its
 * buyer, no order a buyer was told they do not have, stock conserved in MySQL and Redis, the outbox
 * empty, and the runtime's own reconcile (POST /admin/reconcile) reports no drift.
 *
 * A stack of its own (startPrivateStack): the cron passes sweep every shop of the stack they run on.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Stack } from "../../scripts/stack/index.ts";
import { keys } from "../../src/redis/keys.ts";
import type { VoucherReport } from "../../src/services/seckill/reconcile.ts";
import { pollUntil, within } from "../support/child.ts";
import {
  request,
  type RuntimeServer,
  seedBuyers,
  selectedRuntimes,
  stackAppEnv,
  startPrivateStack,
  startRuntime,
  guardedBy,
  workerBundle,
} from "../support/runtimes.ts";
import {
  type Attempt,
  buy,
  type Buyer,
  cronPassInProcess,
  createSaleOverHttp,
  expectEveryOrderOnce,
  expectStockConserved,
  orderFindings,
  outboxSize,
  redisSide,
  settle,
  stockFindings,
} from "../support/sale-checks.ts";

const UNITS = 100;
const BUYERS = 300;
/** Buyers arrive in waves of WAVE_SIZE at once, one wave every WAVE_EVERY_MS (the load's shape): ~1.2 s of arrivals. */
const WAVE_SIZE = 10;
const WAVE_EVERY_MS = 40;
/**
 * The runtime is killed once this many units are taken in Redis (well before they run out; counted
 * in Redis, not in acknowledgements, so a runtime that fails to acknowledge is killed mid-sale too)
 * while at least KILL_IN_FLIGHT requests are in flight.
 */
const KILL_AFTER_UNITS = 25;
const KILL_IN_FLIGHT = 3;
/** A client's pause before trying again after no answer (≤ 50 ms: tests/support/no-long-sleeps.test.ts). */
const RETRY_AFTER_MS = 50;
const REQUEST_TIMEOUT_MS = 5_000;
const SALE_TIMEOUT_MS = 60_000;
const SETTLE_TIMEOUT_MS = 60_000;

const APP_ENV = {
  // Retries after a lost reply must reach the reservation script, not the per-user window.
  SECKILL_USER_LIMIT: "0",
  // No close during the test: every unit taken must become an active order.
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
  // A group claimed by a writer that was killed is claimable again after this (default 30 s).
  ORDER_CLAIM_LEASE_MS: "3000",
};

let dir = "";
let stack: Stack | undefined;
let buyers: Buyer[] = [];
let failed = false;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "cityhub-matrix-kill9-"));
  stack = await startPrivateStack(join(dir, "stack"));
  const { createDeps } = await import("../../src/deps.ts");
  const { parseEnv } = await import("../../src/env.ts");
  const { createLogger } = await import("../../src/log.ts");
  const seeder = createDeps(parseEnv(stackAppEnv(stack, { LOG_LEVEL: "silent" })), { log: createLogger("silent") });
  const [seeded] = await Promise.all([
    within(30_000, "seeding buyers", seedBuyers(seeder, BUYERS)),
    selectedRuntimes().includes("workerd") ? workerBundle(dir) : undefined,
  ]);
  buyers = seeded;
}, 150_000);

afterAll(async () => {
  await stack?.stop();
  if (failed || process.env.MATRIX_KEEP_DIR) console.error(`runtime matrix (kill -9): logs kept in ${dir}`);
  else if (dir) rmSync(dir, { recursive: true, force: true });
}, 30_000);

interface KillSale {
  shopId: number;
  voucherId: number;
  attempts: Attempt[];
  acksAtKill: number;
  /** Units taken in Redis when the kill was sent. */
  unitsAtKill: number;
  /** Attempts in flight when the kill was sent. */
  inFlightAtKill: number;
  acksAfterRestart: number;
  downMs: number;
  redisAfterSale: { stock: number; buyers: number };
  settleMs: number;
}

describe.each(selectedRuntimes())("runtime matrix: kill -9 of the runtime mid-sale on %s", (name) => {
  let server: RuntimeServer | undefined;
  let sale: KillSale | undefined;
  const cronLog: string[] = [];
  const settleTrace: string[] = [];

  const guarded = guardedBy(
    name,
    () => server,
    () => {
      failed = true;
    },
    () => `settle: ${settleTrace.slice(-6).join(" · ")} ${cronLog.slice(-5).join(" | ")}`,
  );
  const requireSale = (): KillSale => {
    if (!sale) throw new Error(`the sale on ${name} did not complete (see the first test's failure)`);
    return sale;
  };

  /** One cron pass on the runtime: workerd's scheduled event, or the jobs from here with the runtime's settings. */
  const cronPass = async (now: number): Promise<string[]> => {
    const s = server as RuntimeServer;
    if (name !== "workerd") return await cronPassInProcess(s.driver(), now);
    const outcome = await s.scheduled(now);
    return outcome === "ok" ? [] : [`scheduled event: ${outcome}`];
  };

  beforeAll(async () => {
    server = await startRuntime(name, { dir, env: stackAppEnv(stack as Stack, APP_ENV) });
  }, 90_000);

  afterAll(async () => {
    await server?.stop();
  }, 20_000);

  test(
    "the sale runs through a kill -9 and a restart on the same port, and the pipeline settles",
    guarded(async () => {
      const s = server as RuntimeServer;
      const deps = s.driver();
      const { shopId, voucherId } = await within(
        20_000,
        "creating the sale",
        createSaleOverHttp(s.url, deps, { units: UNITS, label: `kill9-${name}` }),
      );
      const attempts: Attempt[] = [];
      let acks = 0;
      let inFlight = 0;
      let killed = false;
      let restarted = false;
      let acksAfterRestart = 0;
      const deadline = Date.now() + SALE_TIMEOUT_MS;
      const started = performance.now();

      const shopper = async (i: number) => {
        const wait = started + Math.floor(i / WAVE_SIZE) * WAVE_EVERY_MS - performance.now();
        if (wait > 0) await Bun.sleep(wait); // the arrival schedule, not synchronisation
        const buyer = buyers[i] as Buyer;
        for (;;) {
          inFlight++;
          const outcome = await buy(s.url, voucherId, buyer, { timeoutMs: REQUEST_TIMEOUT_MS });
          inFlight--;
          attempts.push({ buyer, outcome });
          if (outcome.kind === "ack") {
            acks++;
            if (restarted) acksAfterRestart++;
            return;
          }
          if (outcome.kind === "rejected" || Date.now() > deadline) return;
          await Bun.sleep(RETRY_AFTER_MS); // a client's back-off after no answer
        }
      };
      let acksAtKill = 0;
      let unitsAtKill = 0;
      let inFlightAtKill = 0;
      let downMs = 0;
      const chaos = async () => {
        // Units taken, read from Redis while the sale runs (stops once the kill is sent, or on failure).
        let taken = 0;
        let counting = true;
        const counter = (async () => {
          while (counting && Date.now() < deadline) {
            taken = await deps.redis.scard(keys.seckill.buyers(shopId, voucherId));
            await Bun.sleep(5);
          }
        })();
        try {
          await pollUntil(
            `${KILL_AFTER_UNITS} units taken and ${KILL_IN_FLIGHT} requests in flight`,
            async () => taken >= KILL_AFTER_UNITS && inFlight >= KILL_IN_FLIGHT,
            20_000,
            1,
          );
          acksAtKill = acks;
          unitsAtKill = taken;
          inFlightAtKill = inFlight;
          const t0 = Date.now();
          await s.kill9();
          killed = true;
          counting = false;
          await s.restart();
          restarted = true;
          downMs = Date.now() - t0;
        } finally {
          counting = false;
          await counter;
        }
      };
      await within(
        SALE_TIMEOUT_MS + 30_000,
        "the sale and the kill",
        Promise.all([Promise.all(buyers.map((_, i) => shopper(i))), chaos()]),
      );
      expect({ killed, restarted, kills: s.kills, starts: s.starts }).toEqual({
        killed: true,
        restarted: true,
        kills: 1,
        starts: 2,
      });

      const redisAfterSale = await within(5_000, "reading Redis stock", redisSide(deps, shopId, voucherId));
      const settled = await settle(deps, shopId, voucherId, {
        timeoutMs: SETTLE_TIMEOUT_MS,
        cronPass,
        trace: settleTrace,
        log: cronLog,
      });
      sale = {
        shopId,
        voucherId,
        attempts,
        acksAtKill,
        unitsAtKill,
        inFlightAtKill,
        acksAfterRestart,
        downMs,
        redisAfterSale,
        settleMs: settled.ms,
      };
      const count = (k: Attempt["outcome"]["kind"]) => attempts.filter((a) => a.outcome.kind === k).length;
      console.log(
        `matrix kill9 ${name}: acks=${count("ack")} rejected=${count("rejected")} 5xx=${count("error")} lost=${count("lost")} unitsAtKill=${unitsAtKill} acksAtKill=${acksAtKill} ` +
          `inFlightAtKill=${inFlightAtKill} acksAfterRestart=${acksAfterRestart} downMs=${downMs} redisAfterSale=${JSON.stringify(redisAfterSale)} settleMs=${settled.ms} rounds=${settled.rounds}`,
      );
      // The kill landed mid-sale, with requests in flight: orders were acknowledged before it and after the restart.
      expect(unitsAtKill).toBeLessThan(UNITS);
      expect(inFlightAtKill).toBeGreaterThanOrEqual(KILL_IN_FLIGHT);
      expect(acksAfterRestart).toBeGreaterThan(0);
    }),
    SALE_TIMEOUT_MS + SETTLE_TIMEOUT_MS + 60_000,
  );

  test(
    "every acknowledged order is in MySQL exactly once with its buyer; no buyer holds an order they were told they lack",
    guarded(async () => {
      const r = requireSale();
      const found = await orderFindings((server as RuntimeServer).driver(), r.voucherId, r.attempts);
      // Every unit was sold (more buyers than units, and the lost ones retried).
      expectEveryOrderOnce(found, UNITS);
    }),
    30_000,
  );

  test(
    "nothing is lost to the buyers: each holder was acknowledged or told DUPLICATE_ORDER on a retry and finds the order in /of/me; no answer was a 5xx",
    guarded(async () => {
      const r = requireSale();
      const s = server as RuntimeServer;
      const found = await orderFindings(s.driver(), r.voucherId, r.attempts);
      // Told "you hold one" before the writer had the order (no id in the answer): the buyer's own order list has it now.
      const notListed: string[] = [];
      for (const { orderId, buyer } of found.heldWithoutId) {
        const mine = await request<{ id: string }[]>(s.url, "GET", "/api/voucher-order/of/me", {
          token: buyer.token,
          timeoutMs: 10_000,
        });
        if (!(mine.body?.data ?? []).some((o) => o.id === orderId))
          notListed.push(
            `${orderId} (user ${buyer.userId}): ${mine.status} ${JSON.stringify(mine.body)?.slice(0, 200)}`,
          );
      }
      if (found.heldWithoutId.length > 0)
        console.log(
          `matrix kill9 ${name}: ${found.heldWithoutId.length} holder(s) told DUPLICATE_ORDER before the writer had their order; ${found.heldWithoutId.length - notListed.length} found it in /of/me`,
        );
      expect(notListed).toEqual([]);
      // The only fault is the dead process: requests in flight lose their connection (and are retried); none is answered 5xx.
      const fiveXX = r.attempts.filter((a) => a.outcome.kind === "error");
      // For each untold holder, what its attempts were answered (in order).
      const answersOf = (row: string) => {
        const userId = Number(/\(user (\d+)\)/.exec(row)?.[1]);
        const seen = r.attempts
          .filter((a) => a.buyer.userId === userId)
          .map((a) =>
            a.outcome.kind === "rejected"
              ? `${a.outcome.code}${a.outcome.orderId ? `:${a.outcome.orderId}` : ""}`
              : a.outcome.kind === "lost"
                ? `lost(${a.outcome.error.slice(0, 40)})`
                : a.outcome.kind,
          );
        return `${row}: ${seen.join(" → ")}`;
      };
      expect({
        untold: found.untold.length,
        "5xx": fiveXX.length,
        first: [
          ...found.untold.slice(0, 3).map(answersOf),
          ...fiveXX.slice(0, 3).map((a) => JSON.stringify(a.outcome)),
        ],
      }).toEqual({
        untold: 0,
        "5xx": 0,
        first: [],
      });
    }),
    30_000,
  );

  test(
    "stock is conserved in MySQL and in Redis, and the Redis buyers are exactly the users with orders",
    guarded(async () => {
      const r = requireSale();
      // Right after the sale, before any cron pass (reconcile could repair it): the reservation path alone.
      expect(r.redisAfterSale.stock + r.redisAfterSale.buyers).toBe(UNITS);
      const st = await stockFindings((server as RuntimeServer).driver(), r.shopId, r.voucherId);
      expectStockConserved(st, UNITS);
    }),
    30_000,
  );

  test(
    "the outbox is empty and the runtime's reconcile (POST /admin/reconcile) reports no drift",
    guarded(async () => {
      const r = requireSale();
      const s = server as RuntimeServer;
      expect(await within(5_000, "outbox size", outboxSize(s.driver(), r.shopId))).toBe(0);
      // 409 while a cron pass holds the reconcile lock: ask again.
      const report = await pollUntil(
        "a reconcile run on the runtime",
        async () => {
          const res = await request<{ vouchers: VoucherReport[] }>(s.url, "POST", "/admin/reconcile", {
            token: `Bearer ${s.env.ADMIN_TOKEN}`,
            timeoutMs: 30_000,
          });
          if (res.status === 409) return undefined;
          if (res.status !== 200 || !res.body?.data)
            throw new Error(`POST /admin/reconcile → ${res.status} ${res.error ?? JSON.stringify(res.body)}`);
          return res.body.data;
        },
        45_000,
        200,
      );
      const mine = report.vouchers.find((v) => v.voucherId === r.voucherId);
      expect(mine).toBeDefined();
      expect({ drift: mine?.drift, repaired: mine?.repaired, ok: mine?.ok, pending: mine?.pending }).toEqual({
        drift: [],
        repaired: [],
        ok: true,
        pending: 0,
      });
    }),
    60_000,
  );
});

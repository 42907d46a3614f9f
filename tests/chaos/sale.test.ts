/**
 * Chaos: a live flash sale through the real HTTP server and the real engines, while the app
 * process is killed -9 and restarted several times, the local QStash is killed -9 and restarted,
 * and MariaDB is killed -9 and restarted while the writer drains (issue 8, item 5).
 *
 * After the faults, with everything running again, the test drives the cron jobs through the
 * app's own code until the Redis outbox is empty and the MySQL rows stop changing, then checks:
 * every order acknowledged to a client is in MySQL exactly once (with its buyer), no buyer has two
 * orders, stock is conserved in Redis and in MySQL, reconcile reports no drift, the outbox is empty.
 *
 * It relies only on the public contract of the order pipeline (HTTP API, outbox hash, MySQL
 * tables, Redis stock and buyers keys, reconcile's report), not on how orders travel, so it keeps
 * its meaning while the pipeline changes. Unpaid orders are never closed during the test
 * (ORDER_PAY_TIMEOUT_SECONDS = 1 day), so every unit taken in Redis must end up as an active order.
 *
 * Its own stack (tests/chaos/stack.ts), separate from the shared preload stack. Logs of the app
 * and of QStash (every life of them) are in the temp dir, which is kept and printed on failure.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Client as QstashClient } from "@upstash/qstash";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createDeps, type Deps } from "../../src/deps.ts";
import { parseEnv } from "../../src/env.ts";
import type { Logger } from "../../src/log.ts";
import { keys } from "../../src/redis/keys.ts";
import { createSession } from "../../src/services/session.ts";
import { pollUntil, within, type ManagedChild } from "../support/child.ts";
import {
  buy as buyAt,
  createSaleOverHttp,
  mysqlOrderCount,
  orderFindings,
  outboxSize,
  reconcileVoucher,
  redisSide,
  settle as settleSale,
  stockFindings,
  type Buyer,
  type Outcome,
} from "../support/sale-checks.ts";
import { TEST_DEADLINES } from "../support/stack.ts";
import { startChaosStack, type ChaosStack } from "./stack.ts";

const UNITS = 300;
/**
 * Buyers arrive in waves (a flash sale is bursts, and each burst makes the writer drain many
 * orders at once): WAVES × WAVE_SIZE buyers for UNITS units, one wave every WAVE_EVERY_MS, the
 * buyers of a wave spread over its first WAVE_RAMP_MS.
 */
const WAVES = 8;
const WAVE_SIZE = 64;
const WAVE_EVERY_MS = 1_000;
const WAVE_RAMP_MS = 250;
const BUYERS = WAVES * WAVE_SIZE;
const SALE_MS = WAVES * WAVE_EVERY_MS;
const REQUEST_TIMEOUT_MS = 5_000;
const SETTLE_TIMEOUT_MS = 75_000;

/**
 * When (ms after the sale opens) each fault is injected; each waits for the previous recovery.
 * App kills land in the middle of a wave, while its requests are in flight (cut replies).
 * MariaDB is killed once the writer has a backlog (units taken in Redis, not yet in MySQL).
 */
const FAULTS: { atMs: number; target: "app" | "qstash" | "mariadb" }[] = [
  { atMs: 1_120, target: "app" },
  { atMs: 1_600, target: "qstash" },
  { atMs: 2_120, target: "app" },
  { atMs: 3_050, target: "mariadb" },
  { atMs: 4_120, target: "app" },
  { atMs: 4_600, target: "qstash" },
];

const APP_ENV = {
  SECKILL_USER_LIMIT: "0",
  SECKILL_IP_LIMIT: "0",
  // No close during the test: every unit taken must become an active order.
  ORDER_PAY_TIMEOUT_SECONDS: "86400",
};

interface SaleResult {
  shopId: number;
  voucherId: number;
  buyers: Buyer[];
  outcomes: Outcome[];
  /** Units taken in Redis but not yet in MySQL when MariaDB was killed: the writer's backlog. */
  backlogAtMariadbKill: number;
  faultLog: string[];
  /** Redis stock + buyers right after the sale, before any cron job (reconcile) could repair it. */
  redisBeforeSettle: { stock: number; buyers: number };
  settleMs: number;
  settleRounds: number;
}

let dir: string;
let stack: ChaosStack | undefined;
let deps: Deps;
let sale: SaleResult | undefined;
let failed = false;
const testLog: string[] = [];
/** Outbox size and MySQL rows per settle round (printed with CHAOS_VERBOSE=1 and on failure). */
const settleTrace: string[] = [];

/** The test process's own log (cron passes it runs): warnings and errors are kept for diagnosis. */
function recordingLogger(bound: Record<string, unknown> = {}): Logger {
  const keep = (level: string) => (msg: string, fields?: Record<string, unknown>) => {
    const err = fields?.err instanceof Error ? fields.err.message : fields?.err;
    testLog.push(`${level} ${msg} ${JSON.stringify({ ...bound, ...fields, err })}`);
  };
  return {
    debug: () => {},
    info: () => {},
    warn: keep("warn"),
    error: keep("error"),
    child: (f) => recordingLogger({ ...bound, ...f }),
    enabled: (level) => level === "warn" || level === "error",
  };
}

/** Runs a test body; on failure keeps the temp dir and says where the logs are. */
function guarded(fn: () => Promise<void>): () => Promise<void> {
  return async () => {
    try {
      await fn();
    } catch (err) {
      failed = true;
      const tail = [...testLog.slice(-15), ...settleTrace.slice(-10)].join("\n  ");
      console.error(
        `chaos: FAILED; logs kept in ${dir} (app.log, qstash.log)${tail ? `\n  test-side log tail:\n  ${tail}` : ""}`,
      );
      throw err;
    }
  };
}

function requireSale(): SaleResult {
  if (!sale) throw new Error("the chaos sale did not complete (see the first test's failure)");
  return sale;
}

async function createVoucher(): Promise<{ shopId: number; voucherId: number }> {
  return await createSaleOverHttp(stack?.appUrl as string, deps, {
    units: UNITS,
    label: "chaos",
    timeoutMs: REQUEST_TIMEOUT_MS,
  });
}

async function buy(voucherId: number, b: Buyer): Promise<Outcome> {
  return await buyAt(stack?.appUrl as string, voucherId, b, { timeoutMs: REQUEST_TIMEOUT_MS });
}

async function killAndRestart(child: ManagedChild): Promise<number> {
  const started = Date.now();
  await child.kill9();
  await within(30_000, "restart after kill -9", child.start());
  return Date.now() - started;
}

/** Cron passes through the app's own code until the outbox is empty and MySQL stops changing (sale-checks.ts). */
async function settle(shopId: number, voucherId: number): Promise<{ ms: number; rounds: number }> {
  return await settleSale(deps, shopId, voucherId, { timeoutMs: SETTLE_TIMEOUT_MS, trace: settleTrace, log: testLog });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "cityhub-chaos-"));
  stack = await within(90_000, "the chaos stack to start", startChaosStack({ dir, appEnv: APP_ENV }));
  // The test side (session setup, cron passes, checks) observes the system; the app under test is
  // the child process, which keeps the production deadlines. With those here, the 512 sessions
  // created at once (and checks while MariaDB restarts) met REDIS_TIMEOUT_MS (250 ms) on a loaded
  // machine and failed the setup, not the sale.
  deps = createDeps(parseEnv({ ...stack.env, ...TEST_DEADLINES }), { log: recordingLogger() });
}, 100_000);

afterAll(async () => {
  await stack?.stop();
  if (failed || process.env.CHAOS_KEEP_DIR) console.error(`chaos: temp dir kept: ${dir}`);
  else if (dir) rmSync(dir, { recursive: true, force: true });
}, 60_000);

describe("chaos: a flash sale survives kill -9 of the app, QStash and MariaDB", () => {
  test(
    "the sale runs through the faults and the system settles: outbox empty, MySQL rows stable",
    guarded(async () => {
      const s = stack as ChaosStack;
      const { shopId, voucherId } = await within(15_000, "creating the voucher", createVoucher());
      const base = 7_000_000 + Math.floor(Math.random() * 1_000_000) * 1_000;
      const buyers: Buyer[] = await within(
        20_000,
        "creating buyer sessions",
        Promise.all(
          Array.from({ length: BUYERS }, async (_, i) => ({
            userId: base + i,
            token: await createSession(
              deps.redis,
              { id: base + i, nickName: `c${i}`, icon: "" },
              3600,
              deps.isolate.sessions.keys,
            ),
          })),
        ),
      );

      const outcomes: Outcome[] = new Array(BUYERS);
      const saleStart = performance.now();
      // The arrival schedule (the load's shape), not synchronisation.
      const arrive = async (i: number) => {
        const at = Math.floor(i / WAVE_SIZE) * WAVE_EVERY_MS + ((i % WAVE_SIZE) * WAVE_RAMP_MS) / WAVE_SIZE;
        const wait = saleStart + at - performance.now();
        if (wait > 0) await Bun.sleep(wait);
        outcomes[i] = await buy(voucherId, buyers[i] as Buyer);
      };
      const faultLog: string[] = [];
      let backlogAtMariadbKill = -1;
      const chaos = async () => {
        for (const f of FAULTS) {
          const wait = saleStart + f.atMs - performance.now();
          if (wait > 0) await Bun.sleep(wait); // when to inject the fault
          let at = Math.round(performance.now() - saleStart);
          let downMs: number;
          if (f.target === "mariadb") {
            // "While the writer drains": wait (bounded) until units taken in Redis are not all in MySQL yet.
            backlogAtMariadbKill = await pollUntil(
              "a writer backlog to restart MariaDB into",
              async () => {
                const [taken, rows] = await Promise.all([
                  deps.redis.scard(keys.seckill.buyers(shopId, voucherId)),
                  mysqlOrderCount(deps, voucherId),
                ]);
                const backlog = taken - rows;
                return backlog > 0 ? backlog : undefined;
              },
              2_000,
              5,
            ).catch(() => 0);
            at = Math.round(performance.now() - saleStart);
            downMs = (await s.restartMariadb()).downMs;
          } else {
            downMs = await killAndRestart(f.target === "app" ? s.app : s.qstash);
          }
          faultLog.push(`${f.target}@${at}ms down ${downMs}ms`);
        }
      };
      await within(
        SALE_MS + 90_000,
        "the sale and its faults",
        Promise.all([Promise.all(Array.from({ length: BUYERS }, (_, i) => arrive(i))), chaos()]),
      );
      expect(s.app.alive && s.qstash.alive).toBe(true);

      const redisBeforeSettle = await within(5_000, "reading Redis stock", redisSide(deps, shopId, voucherId));
      const settled = await settle(shopId, voucherId);
      sale = {
        shopId,
        voucherId,
        buyers,
        outcomes,
        backlogAtMariadbKill,
        faultLog,
        redisBeforeSettle,
        settleMs: settled.ms,
        settleRounds: settled.rounds,
      };
      expect(await within(5_000, "outbox size", outboxSize(deps, shopId))).toBe(0);
    }),
    SALE_MS + 160_000,
  );

  test(
    "every acknowledged order is in MySQL exactly once, with its buyer, and no buyer has two orders",
    guarded(async () => {
      const { voucherId, buyers, outcomes } = requireSale();
      const found = await orderFindings(
        deps,
        voucherId,
        outcomes.map((outcome, i) => ({ buyer: buyers[i] as Buyer, outcome })),
      );
      expect(found.missing).toEqual([]);
      expect(found.wrongUser).toEqual([]);
      expect(found.duplicateBuyers).toEqual([]);
      expect(found.rows.length).toBeLessThanOrEqual(UNITS);
      // An order nobody was told about may exist only for a buyer whose reply never arrived.
      expect(found.unannounced).toEqual([]);
      // Every row is still an active order (nothing is closed during the test).
      expect(found.inactive.length).toBe(0);
    }),
    30_000,
  );

  test(
    "stock is conserved in MySQL and in Redis, and Redis buyers are exactly the users with orders",
    guarded(async () => {
      const { shopId, voucherId, redisBeforeSettle } = requireSale();
      // Before any cron job ran (reconcile could have repaired it): the reservation path alone.
      expect(redisBeforeSettle.stock + redisBeforeSettle.buyers).toBe(UNITS);
      const st = await stockFindings(deps, shopId, voucherId);
      expect(st.mysqlStock + st.active).toBe(UNITS);
      expect(st.redis.stock + st.redis.buyers).toBe(UNITS);
      expect(st.redis.buyers).toBe(st.active);
      expect(st.redis.stock).toBe(st.mysqlStock);
      expect(st.activeNotInBuyers).toEqual([]);
      expect(st.buyerMembers).toBe(st.active);
    }),
    30_000,
  );

  test(
    "reconcile reports no drift and the outbox is empty",
    guarded(async () => {
      const { shopId, voucherId } = requireSale();
      const mine = await reconcileVoucher(deps, voucherId);
      expect(mine).toBeDefined();
      expect(mine?.drift).toEqual([]);
      expect(mine?.repaired).toEqual([]);
      expect(mine?.ok).toBe(true);
      expect(await within(5_000, "outbox size", outboxSize(deps, shopId))).toBe(0);
    }),
    30_000,
  );

  test(
    "the app never logged a MySQL deadlock (errno 1213) as an unhandled error; prints the summary",
    guarded(async () => {
      const sr = requireSale();
      const s = stack as ChaosStack;
      const lines = readFileSync(s.appLog, "utf8").split("\n");
      const unhandled = lines.filter((l) => l.includes('"unhandled error"'));
      const deadlocks = unhandled.filter((l) => /errno 1213|Deadlock found/i.test(l));
      const count = (k: Outcome["kind"]) => sr.outcomes.filter((o) => o.kind === k).length;
      const orders = await within(10_000, "MySQL order count", mysqlOrderCount(deps, sr.voucherId));
      const dlq = await within(
        10_000,
        "QStash DLQ",
        new QstashClient({
          baseUrl: s.env.QSTASH_URL,
          token: s.env.QSTASH_TOKEN as string,
          enableTelemetry: false,
        }).dlq.listMessages(),
      )
        .then((r) => r.messages.length)
        .catch(() => -1);
      console.log(
        `chaos: acknowledged=${count("ack")} repliesLost=${count("lost")} rejected=${count("rejected")} errors=${count("error")} ` +
          `appKills=${s.app.kills} qstashKills=${s.qstash.kills} mariadbRestarts=${s.mariadbRestarts} backlogAtMariadbKill=${sr.backlogAtMariadbKill} ` +
          `settleMs=${sr.settleMs} settleRounds=${sr.settleRounds} orders=${orders} dlq=${dlq} unhandledErrors=${unhandled.length} deadlockErrors=${deadlocks.length}`,
      );
      console.log(`chaos: faults ${sr.faultLog.join(", ")}`);
      if (process.env.CHAOS_VERBOSE)
        console.log(`chaos: settle ${settleTrace.filter((_, i) => i % 10 === 0).join(" · ")}`);
      if (unhandled.length > 0) {
        const causes = new Map<string, number>();
        for (const l of unhandled) {
          let cause = "?";
          try {
            const j = JSON.parse(l) as { path?: string; err?: { message?: string } };
            cause = `${j.path ?? "?"}: ${(j.err?.message ?? "?").replace(/\d{6,}/g, "N").slice(0, 140)}`;
          } catch {
            /* not a JSON line */
          }
          causes.set(cause, (causes.get(cause) ?? 0) + 1);
        }
        console.log(
          `chaos: unhandled errors in the app log by cause: ${[...causes].map(([c, n]) => `${n}× ${c}`).join(" | ")}`,
        );
      }
      expect(s.app.kills).toBeGreaterThanOrEqual(3);
      expect(s.qstash.kills).toBeGreaterThanOrEqual(1);
      expect(s.mariadbRestarts).toBeGreaterThanOrEqual(1);
      // KNOWN FAILURE with the per-order writer (main at 7fddcd8): it lets MySQL deadlocks
      // (errno 1213) escape as unhandled 500s — seen when the sweep's re-sends arrive as a burst of
      // parallel single-order writes on the hot stock row (27 in one run, 0 in others: intermittent).
      // Issue 8 item 2 requires lock conflicts to be retried inside the handler and never logged as
      // unhandled; this assertion is that requirement. Do not relax it.
      expect(deadlocks.length).toBe(0);
    }),
    30_000,
  );
});

/**
 * Runtime matrix, the cron on workerd (issue 15 item 4): the Worker's scheduled event (wrangler.toml
 * [triggers], src/entry/worker.ts `scheduled`) recovers a drain that was never announced.
 *
 *   1. The built Worker runs in workerd (tests/support/runtimes.ts) with QStash unreachable
 *      (QSTASH_URL = a closed port): a buyer's reservation is acknowledged with an order id, its
 *      entry is in the shop's Redis outbox, and the drain publish fails (the Worker logs it) — no
 *      message will ever make the writer drain that shop.
 *   2. The Worker is started again on the same port with QStash reachable, and the outbox sweep's
 *      threshold at 1 s (OUTBOX_REPUBLISH_AFTER_SECONDS): nothing drains the entry by itself.
 *   3. One scheduled event (miniflare's /cdn-cgi/handler/scheduled, the same handler Cloudflare's
 *      cron calls) runs the jobs: the sweep publishes a drain, QStash delivers it to the Worker's
 *      drain route (ORDER_DRAIN_PATH), and the order reaches MySQL with its buyer; the outbox empties.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../../scripts/stack/engines.ts";
import type { Stack } from "../../scripts/stack/index.ts";
import { keys } from "../../src/redis/keys.ts";
import { parseReservation } from "../../src/services/seckill/outbox.ts";
import { pollUntil, within } from "../support/child.ts";
import {
  request,
  type RuntimeServer,
  seedBuyers,
  selectedRuntimes,
  stackAppEnv,
  startPrivateStack,
  startRuntime,
  tail,
} from "../support/runtimes.ts";
import { buy, createSaleOverHttp, mysqlOrderCount, outboxSize } from "../support/sale-checks.ts";

const run = selectedRuntimes().includes("workerd") ? describe : describe.skip;

let dir = "";
let stack: Stack | undefined;
let server: RuntimeServer | undefined;
let failed = false;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "cityhub-matrix-cron-"));
}, 10_000);

afterAll(async () => {
  await server?.stop();
  await stack?.stop();
  if (failed || process.env.MATRIX_KEEP_DIR) console.error(`runtime matrix (cron): logs kept in ${dir}`);
  else if (dir) rmSync(dir, { recursive: true, force: true });
}, 30_000);

run("runtime matrix: the cron on workerd (scheduled event)", () => {
  test("recovers a drain that was never announced: the order reaches MySQL through the Worker's own sweep and writer", async () => {
    try {
      stack = await startPrivateStack(join(dir, "stack"));
      const env = stackAppEnv(stack, { OUTBOX_REPUBLISH_AFTER_SECONDS: "1" });
      server = await startRuntime("workerd", { dir, env });
      const s = server;
      const deps = s.driver();
      const { shopId, voucherId } = await within(
        20_000,
        "creating the sale",
        createSaleOverHttp(s.url, deps, { units: 5, label: "cron" }),
      );
      const [buyer] = await seedBuyers(deps, 1);
      if (!buyer) throw new Error("no buyer");

      // 1. QStash unreachable from the Worker: the reservation is acknowledged, its drain is never published.
      await s.stop();
      await s.restart({ ...env, QSTASH_URL: `http://127.0.0.1:${await freePort()}` });
      const mark = s.logSize();
      const outcome = await buy(s.url, voucherId, buyer, { timeoutMs: 15_000 });
      if (outcome.kind !== "ack") throw new Error(`the reservation was not acknowledged: ${JSON.stringify(outcome)}`);
      const orderId = outcome.orderId;
      await pollUntil(
        "the Worker to log that the drain publish failed",
        async () => s.logSince(mark).includes("drain publish failed"),
        15_000,
        50,
      );
      const raw = await deps.redis.hget<unknown>(keys.seckill.outbox(shopId), orderId);
      expect(raw ?? "no outbox entry").not.toBe("no outbox entry");
      const reservation = parseReservation(raw);
      expect({ orderId: reservation.orderId, userId: reservation.userId }).toEqual({ orderId, userId: buyer.userId });

      // 2. QStash reachable again, same port; the entry is overdue for the sweep once a second old.
      await s.stop();
      await s.restart(env);
      await pollUntil(
        "the outbox entry to be overdue (OUTBOX_REPUBLISH_AFTER_SECONDS = 1)",
        async () => Date.now() > reservation.reservedAt + 1_100,
        10_000,
        20,
      );
      // Nothing drained it meanwhile: no message was ever sent for it.
      expect({ mysql: await mysqlOrderCount(deps, voucherId), outbox: await outboxSize(deps, shopId) }).toEqual({
        mysql: 0,
        outbox: 1,
      });

      // 3. One scheduled event, at the trigger's own time.
      const cronMark = s.logSize();
      expect(await within(60_000, "the scheduled event", s.scheduled(Date.now()))).toBe("ok");
      const row = await pollUntil(
        "the order in MySQL (sweep → QStash → the Worker's writer)",
        async () =>
          (await deps.db.execute("SELECT id, user_id, status FROM tb_voucher_order WHERE id = ?", [orderId])).rows[0] as
            | { id: string; user_id: string; status: string }
            | undefined,
        20_000,
        100,
      );
      expect({ id: String(row.id), userId: Number(row.user_id), status: Number(row.status) }).toEqual({
        id: orderId,
        userId: buyer.userId,
        status: 1,
      });
      await pollUntil("the outbox to empty", async () => (await outboxSize(deps, shopId)) === 0, 10_000, 50);
      expect(await mysqlOrderCount(deps, voucherId)).toBe(1);
      // The buyer sees the written order (not "queued").
      const mine = await request<{ id: string; status: string }>(s.url, "GET", `/api/voucher-order/${orderId}`, {
        token: buyer.token,
      });
      expect({ status: mine.status, id: mine.body?.data?.id, state: mine.body?.data?.status }).toEqual({
        status: 200,
        id: orderId,
        state: "unpaid",
      });
      expect(s.logSince(cronMark)).not.toContain("cron job failed");
    } catch (err) {
      failed = true;
      if (err instanceof Error && server)
        err.message += `\n--- workerd log tail (${server.logFile}) ---\n${tail(server.logFile, 3000)}`;
      throw err;
    }
  }, 180_000);
});

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  assertLoopback,
  REFUSAL_REASONS,
  runSale,
  SaleError,
  type SaleOptions,
  type SaleSummary,
} from "../../scripts/sale.ts";
import { createShop, createShopType } from "../support/fixtures.ts";
import { type ServedApp, serveTestApp } from "../support/stack.ts";

let t: ServedApp;
beforeAll(async () => {
  t = await serveTestApp();
});
afterAll(async () => {
  await t.stop();
});

const optionsFor = async (over: Partial<SaleOptions>): Promise<SaleOptions> => ({
  baseUrl: t.url,
  stock: 50,
  buyers: 120,
  concurrency: 20,
  buckets: 1,
  startInS: 0,
  adminToken: t.deps.config.ADMIN_TOKEN,
  sessionSecret: t.deps.config.SESSION_SECRET,
  redis: t.deps.redis,
  db: t.deps.db,
  shopId: await createShop(t, await createShopType(t)),
  drainTimeoutMs: 30_000,
  quiet: true,
  ...over,
});

const refused = (s: SaleSummary) => REFUSAL_REASONS.reduce((n, r) => n + s.refusals[r], 0);

describe("sale simulator", () => {
  test("sells exactly the stock, every attempt is a sale or a counted refusal, and MySQL has every order once the writer drained", async () => {
    const s = await runSale(await optionsFor({ repeatShare: 1 }));
    expect(s.sold).toBe(50);
    expect(s.buyers).toBe(120);
    // 120 buyers spread over 3 loopback source addresses (one per 40), as a crowd would be.
    expect(s.sourceAddresses).toBe(3);
    // Every winner clicked again (repeatShare 1) and was told they hold an order.
    expect(s.refusals.DUPLICATE_ORDER).toBe(50);
    expect(s.refusals.SOLD_OUT).toBe(70);
    expect(s.refusals.RATE_LIMITED + s.refusals.NOT_STARTED + s.refusals.other).toBe(0);
    expect(s.sold + refused(s)).toBe(s.attempts);
    expect(s.attempts).toBe(170);
    expect(s.drained).toBe(true);
    expect(s.ordersInMysql).toBe(50);
    expect(s.outboxPending).toBe(0);
    expect(s.latencyMs.p50).toBeGreaterThan(0);
    expect(s.latencyMs.p99).toBeGreaterThanOrEqual(s.latencyMs.p50);
    expect(s.consoleUrl).toBe(`${t.url}/console?voucher=${s.voucherId}`);
    const row = (
      await t.deps.db.execute("SELECT COUNT(DISTINCT user_id) AS n FROM tb_voucher_order WHERE voucher_id = ?", [
        s.voucherId,
      ])
    ).rows[0] as { n: string };
    expect(Number(row.n)).toBe(50);
  }, 60_000);

  test("buyers who arrive before the sale opens are told NOT_STARTED and buy once it opens", async () => {
    const s = await runSale(await optionsFor({ stock: 5, buyers: 12, startInS: 2, repeatShare: 0, buckets: 2 }));
    expect(s.refusals.NOT_STARTED).toBeGreaterThan(0);
    expect(s.sold).toBe(5);
    expect(s.sold + refused(s)).toBe(s.attempts);
    expect(s.ordersInMysql).toBe(5);
    expect(s.outboxPending).toBe(0);
  }, 60_000);

  test("refuses a base URL that is not loopback unless --allow-remote", async () => {
    await expect(runSale(await optionsFor({ baseUrl: "https://shop.example.com" }))).rejects.toThrow(
      /not loopback.*--allow-remote/,
    );
    await expect(runSale(await optionsFor({ baseUrl: "http://10.1.2.3:8787" }))).rejects.toBeInstanceOf(SaleError);
    expect(() => assertLoopback("https://shop.example.com", true)).not.toThrow();
    for (const ok of ["http://127.0.0.1:8787", "http://localhost:8787", "http://[::1]:8787", "http://127.3.4.5"])
      expect(() => assertLoopback(ok)).not.toThrow();
    expect(() => assertLoopback("http://127.0.0.1.evil.example")).toThrow(SaleError);
  });
});

/**
 * The operators' console in a real browser (headless Chromium, tests/browser/chromium.ts) against
 * the app served over HTTP on the test stack: what an operator sees and clicks — the sign-in form,
 * a live sale while the sale simulator (`npm run sale`'s runSale) drives a crowd at it, the
 * voucher form's field errors, reconcile's run-now button. Pages are found by their URLs, labels,
 * headings and button names; the live numbers by their `data-k` keys. Every request the pages make
 * must stay on the app's origin, and a console error, uncaught exception or CSP violation fails
 * the test that caused it.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Browser, BrowserContext, Locator, Page } from "playwright-core";
import { runSale } from "../../scripts/sale.ts";
import { keys } from "../../src/redis/keys.ts";
import { RETIRE_AFTER_MS } from "../../src/services/seckill/registry.ts";
import { homeShard } from "../../src/services/seckill/shards.ts";
import { toSqlUtc } from "../../src/util/time.ts";
import { createShop, createShopType } from "../support/fixtures.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { getShardStack } from "../support/shards.ts";
import { type ServedApp, serveTestApp } from "../support/stack.ts";
import { launchChromium, type PageWatch, watchPage } from "./chromium.ts";

let t: ServedApp;
let browser: Browser;
let context: BrowserContext;
let page: Page;
let watch: PageWatch;
let shopId: number;

/** Each test's limit, ms: above Playwright's own waits (10 s), so a stuck wait fails with its reason, not a kill. */
const TEST_MS = 20_000;

beforeAll(async () => {
  [t, browser] = await Promise.all([serveTestApp(), launchChromium()]);
  shopId = await createShop(t, await createShopType(t));
  context = await browser.newContext({ baseURL: t.url });
  context.setDefaultTimeout(10_000);
  watch = await watchPage(context, t.url);
  page = await context.newPage();
});

afterAll(async () => {
  await browser?.close();
  await t?.stop();
});

/** The page's problems so far, emptied: each test owns what it caused. */
function problems(): string[] {
  return watch.problems.splice(0);
}

/** A time `ms` from now as the form takes it (UTC, with Z). */
const formTime = (ms: number) => `${new Date(Date.now() + ms).toISOString().slice(0, 19)}Z`;

/** The form whose submit button is named `button`. */
const formWith = (button: string): Locator =>
  page.locator("form").filter({ has: page.getByRole("button", { name: button, exact: true }) });

/** A live number of the sale page, by its key. */
const live = (k: string): Locator => page.locator(`[data-k="${k}"]`);

async function signIn(): Promise<void> {
  await page.goto("/console");
  if (!new URL(page.url()).pathname.endsWith("/login")) return;
  await page.getByLabel("Operator token").fill(t.deps.config.ADMIN_TOKEN);
  await Promise.all([
    page.waitForURL((u) => u.pathname === "/console"),
    page.getByRole("button", { name: "Sign in" }).click(),
  ]);
}

describe("console in a browser", () => {
  test(
    "an operator signs in through the form: a wrong token is refused on the form, ADMIN_TOKEN opens the sales page",
    async () => {
      await page.goto("/console");
      expect(new URL(page.url()).pathname).toBe("/console/login");
      await page.getByLabel("Operator token").fill("not-the-operator-token");
      watch.expectStatus(401, "/console/login");
      await page.getByRole("button", { name: "Sign in" }).click();
      await page.getByText("Not the operator token.").waitFor();
      await page.getByLabel("Operator token").fill(t.deps.config.ADMIN_TOKEN);
      await Promise.all([
        page.waitForURL((u) => u.pathname === "/console"),
        page.getByRole("button", { name: "Sign in" }).click(),
      ]);
      await page.getByRole("heading", { name: "Seckill sales" }).waitFor();
      // The session cookie is HttpOnly: the page's scripts never see it.
      expect(await page.evaluate(() => document.cookie)).toBe("");
      expect(problems()).toEqual([]);
    },
    TEST_MS,
  );

  test("the live sale view follows a sale driven by the sale simulator: stock falls to 0, reservations and orders rise to the stock", async () => {
    await signIn();
    const stock = 30;
    let voucherId = 0;
    let announced: () => void = () => {};
    const created = new Promise<void>((resolve) => {
      announced = resolve;
    });
    // The crowd arrives up to 3 s after the voucher exists (startInS), so the page is open before the first attempt.
    const sale = runSale({
      baseUrl: t.url,
      stock,
      buyers: 90,
      concurrency: 15,
      buckets: 2,
      startInS: 3,
      repeatShare: 0.2,
      shopId,
      adminToken: t.deps.config.ADMIN_TOKEN,
      sessionSecret: t.deps.config.SESSION_SECRET,
      redis: t.deps.redis,
      db: t.deps.db,
      drainTimeoutMs: 20_000,
      log: (m) => {
        const id = /^voucher (\d+) /.exec(m)?.[1];
        if (id) {
          voucherId = Number(id);
          announced();
        }
      },
    });
    await Promise.race([created, sale]);
    expect(voucherId).toBeGreaterThan(0);
    await page.goto(`/console/sale/${voucherId}`);
    await page.getByRole("heading", { name: `Sale of voucher ${voucherId}` }).waitFor();
    const before = {
      stockLeft: await live("stockLeft").textContent(),
      reservations: await live("reservations").textContent(),
    };
    // The numbers move while the page stays open (server-sent events, no reload).
    await live("stockLeft").filter({ hasText: /^0$/ }).waitFor({ timeout: 20_000 });
    await live("reservations")
      .filter({ hasText: new RegExp(`^${stock}$`) })
      .waitFor();
    await live("o-ok")
      .filter({ hasText: new RegExp(`^${stock}$`) })
      .waitFor();
    await live("o-SOLD_OUT")
      .filter({ hasText: /^[1-9]\d*$/ })
      .waitFor();
    const summary = await sale;
    expect(summary.voucherId).toBe(voucherId);
    expect(summary.sold).toBe(stock);
    expect(summary.drained).toBe(true);
    await live("ordersInMysql")
      .filter({ hasText: new RegExp(`^${stock}$`) })
      .waitFor({ timeout: 10_000 });
    await live("state").filter({ hasText: "sold out" }).waitFor();
    expect(before).toEqual({ stockLeft: String(stock), reservations: "0" });
    expect(new URL(page.url()).pathname).toBe(`/console/sale/${voucherId}`);
    expect(problems()).toEqual([]);
  }, 30_000);

  test(
    "creating a seckill voucher: an end before its begin is shown on the 'Sale ends' field, the corrected form creates it and opens its sale page",
    async () => {
      await signIn();
      await page.goto("/console/vouchers");
      const form = formWith("Create seckill voucher");
      const title = `browser ${crypto.randomUUID().slice(0, 8)}`;
      await form.getByLabel("Shop id", { exact: true }).fill(String(shopId));
      await form.getByLabel("Title", { exact: true }).fill(title);
      await form.getByLabel("Price (cents)", { exact: true }).fill("990");
      await form.getByLabel("Face value (cents)", { exact: true }).fill("10000");
      await form.getByLabel("Stock", { exact: true }).fill("10");
      await form.getByLabel("Sale begins", { exact: true }).fill(formTime(3_600_000));
      await form.getByLabel("Sale ends", { exact: true }).fill(formTime(60_000));
      watch.expectStatus(400, "/console/vouchers/seckill");
      await Promise.all([
        page.waitForResponse(
          (r) => r.request().method() === "POST" && new URL(r.url()).pathname === "/console/vouchers/seckill",
        ),
        form.getByRole("button").click(),
      ]);

      // Back on the form, with what was typed kept and the error tied to its field (aria-describedby).
      const again = formWith("Create seckill voucher");
      const ends = again.getByLabel("Sale ends", { exact: true });
      expect(await ends.getAttribute("aria-invalid")).toBe("true");
      const describedBy = await ends.getAttribute("aria-describedby");
      expect(describedBy).toBeTruthy();
      expect(await page.locator(`[id="${describedBy}"]`).textContent()).toMatch(/after beginTime/);
      expect(await again.getByLabel("Title", { exact: true }).inputValue()).toBe(title);
      expect(await again.getByLabel("Sale begins", { exact: true }).getAttribute("aria-invalid")).toBeNull();
      expect(
        await t.deps.db.execute("SELECT id FROM tb_voucher WHERE title = ?", [title]).then((r) => r.rows.length),
      ).toBe(0);

      await ends.fill(formTime(7_200_000));
      await Promise.all([
        page.waitForURL((u) => /^\/console\/sale\/\d+$/.test(u.pathname)),
        again.getByRole("button").click(),
      ]);
      const id = Number(new URL(page.url()).pathname.split("/").at(-1));
      await page.getByRole("heading", { name: `Sale of voucher ${id}` }).waitFor();
      await live("state").filter({ hasText: "upcoming" }).waitFor();
      const rows = (await t.deps.db.execute("SELECT id FROM tb_voucher WHERE title = ?", [title])).rows as {
        id: string | number;
      }[];
      expect(rows.map((r) => Number(r.id))).toEqual([id]);
      expect(problems()).toEqual([]);
    },
    TEST_MS,
  );

  test(
    "reconcile's run-now button runs it and the operations page shows the fresh report",
    async () => {
      await signIn();
      await page.goto("/console/ops");
      await page.getByRole("heading", { name: "Operations" }).waitFor();
      const started = Date.now();
      const [answer] = await Promise.all([
        page.waitForResponse(
          (r) => r.request().method() === "POST" && new URL(r.url()).pathname === "/console/ops/reconcile",
        ),
        page.getByRole("button", { name: "Run reconcile now" }).click(),
      ]);
      expect(answer.status()).toBe(303);
      await page.waitForURL((u) => u.pathname === "/console/ops" && u.searchParams.has("reconcile"));
      await page.getByText("Reconcile ran: the report below is the new one.").waitFor();
      expect(await page.getByText(/^Last report: /).textContent()).not.toContain("never");
      const report = await t.deps.redis.get<{ at: number }>(keys.seckill.reconcileReport());
      expect(report?.at ?? 0).toBeGreaterThanOrEqual(started - 1000);
      expect(problems()).toEqual([]);
    },
    TEST_MS,
  );

  test(
    "a sharded sale's view lists its shards and keeps them live: a buyer homed in each shard takes one of its units, and each row follows",
    async () => {
      const shards = await getShardStack(4);
      const served = await serveTestApp({
        ...shards.env,
        SECKILL_USER_LIMIT: "0",
        SECKILL_IP_LIMIT: "0",
        ORDER_PAY_TIMEOUT_SECONDS: "86400",
      });
      const other = await browser.newContext({ baseURL: served.url });
      other.setDefaultTimeout(10_000);
      const sale = await createSeckill(served, {
        stock: 8,
        shopId: await createShop(served, await createShopType(served)),
      });
      try {
        const w = await watchPage(other, served.url);
        const p = await other.newPage();
        await p.goto("/console/login");
        await p.getByLabel("Operator token").fill(served.deps.config.ADMIN_TOKEN);
        await Promise.all([
          p.waitForURL((u) => u.pathname === "/console"),
          p.getByRole("button", { name: "Sign in" }).click(),
        ]);
        await p.goto(`/console/sale/${sale.voucherId}`);
        const cell = (k: string) => p.locator(`[data-k="${k}"]`);
        await p.getByRole("heading", { name: "Shards" }).waitFor();
        expect(await p.locator("#shards tbody tr").count()).toBe(4);
        expect(await Promise.all([0, 1, 2, 3].map((i) => cell(`shard-${i}-stock`).textContent()))).toEqual([
          "2",
          "2",
          "2",
          "2",
        ]);

        // One buyer homed in each shard: each shard sells one of its two units (no stock moves).
        const homed = [0, 1, 2, 3].map((shard) => {
          for (;;) {
            const [u] = userIds(1);
            if (homeShard(u ?? 0, 4) === shard) return u ?? 0;
          }
        });
        const tokens = await sessionsFor(served, homed);
        await Promise.all(
          tokens.map((token) =>
            fetch(`${served.url}/api/voucher-order/seckill/${sale.voucherId}`, {
              method: "POST",
              headers: { authorization: token },
            }),
          ),
        );
        await cell("stockLeft").filter({ hasText: /^4$/ }).waitFor();
        await cell("reservations").filter({ hasText: /^4$/ }).waitFor();
        for (let i = 0; i < 4; i++) {
          await cell(`shard-${i}-stock`).filter({ hasText: /^1$/ }).waitFor();
          await cell(`shard-${i}-buyers`).filter({ hasText: /^1$/ }).waitFor();
        }
        expect(await Promise.all([0, 1, 2, 3].map((i) => cell(`shard-${i}-share`).textContent()))).toEqual([
          "2",
          "2",
          "2",
          "2",
        ]);
        expect(w.offOrigin()).toEqual([]);
        expect(w.problems).toEqual([]);
      } finally {
        await other.close();
        // Later test files run jobs on apps without these shards: the sale leaves the registry.
        const end = Date.now() - RETIRE_AFTER_MS - 86_400_000;
        await served.deps.db.execute(
          "UPDATE tb_seckill_voucher SET begin_time = ?, end_time = ? WHERE voucher_id = ?",
          [toSqlUtc(end - 3_600_000), toSqlUtc(end), sale.voucherId],
        );
        await served.deps.db.execute("UPDATE tb_voucher_order SET status = 4 WHERE status = 1 AND voucher_id = ?", [
          sale.voucherId,
        ]);
        await served.settle();
        await served.stop();
      }
    },
    TEST_MS,
  );

  test(
    "the watch is not blind: an inline script and an off-origin image put on a console page are CSP violations it reports, and the image's blocked request is recorded as off-origin",
    async () => {
      const other = await browser.newContext({ baseURL: t.url });
      try {
        const w = await watchPage(other, t.url);
        const p = await other.newPage();
        await p.goto("/console/login");
        const reported = (directive: string) =>
          p.waitForEvent("console", (m) => m.text().startsWith(`CSP violation: ${directive}`));
        const [, , blocked] = await Promise.all([
          reported("script-src"),
          reported("img-src"),
          p.waitForEvent("requestfailed", (r) => r.url().startsWith("http://cdn.example.invalid/")),
          p.evaluate(() => {
            const s = document.createElement("script");
            s.textContent = "window.inlineRan = true";
            document.body.appendChild(s);
            const img = document.createElement("img");
            img.src = "http://cdn.example.invalid/pixel.png";
            document.body.appendChild(img);
          }),
        ]);
        expect(await p.evaluate(() => (window as unknown as { inlineRan?: boolean }).inlineRan)).toBeUndefined();
        expect(w.problems.filter((x) => x.includes("CSP violation")).length).toBeGreaterThanOrEqual(2);
        // Chromium reports the attempt, then the CSP refuses it: the recorder counts attempts, so a leak cannot hide behind the CSP.
        expect(blocked.failure()?.errorText).toBe("csp");
        expect(w.offOrigin()).toEqual(["http://cdn.example.invalid/pixel.png"]);
      } finally {
        await other.close();
      }
    },
    TEST_MS,
  );

  test("no page requested anything outside the app's origin, and the pages did load their own scripts and event streams", () => {
    expect(watch.requests.length).toBeGreaterThan(10);
    expect(watch.offOrigin()).toEqual([]);
    const paths = new Set(watch.requests.map((u) => new URL(u).pathname));
    expect([...paths].some((p) => /^\/console\/sale\/\d+\/events$/.test(p))).toBe(true);
    expect([...paths].some((p) => p.startsWith("/console/assets/") && p.endsWith(".js"))).toBe(true);
    expect(problems()).toEqual([]);
  });
});

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { SESSION_COOKIE } from "../../src/console/session.ts";
import { keys } from "../../src/redis/keys.ts";
import { findReservation, writeOrder } from "../../src/services/seckill/orders.ts";
import { RETIRE_AFTER_MS } from "../../src/services/seckill/registry.ts";
import { toSqlUtc } from "../../src/util/time.ts";
import { deadLetter, deadLettersOf, type FailingTarget, SECRET, startFailingTarget } from "../support/dlq.ts";
import { call, loginAs } from "../support/http.ts";
import { createShop, createShopType } from "../support/fixtures.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { getShardStack } from "../support/shards.ts";
import { createTestApp, eventually, getStack, serveTestApp, type TestApp } from "../support/stack.ts";

/** The console's origin is the configured PUBLIC_URL's (the test apps' default), whatever Host the request names. */
const ORIGIN = new URL(String((await getStack()).env.PUBLIC_URL)).origin;
const FORM = { "content-type": "application/x-www-form-urlencoded", origin: ORIGIN };
const PAGES = ["/console", "/console/vouchers", "/console/ops", "/console/orders", "/console/orders?userId=1"];
/** The pages' icon (http/page.tsx): an empty data URL, which loads nothing. */
const NO_ICON = "data:,";

let t: TestApp;
beforeAll(async () => {
  t = await createTestApp();
});

const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString();

/** The cells (text) of the first table row of `html` whose first cell is `first`, or null. */
function rowOf(html: string, first: string): string[] | null {
  for (const m of html.matchAll(/<tr>(.*?)<\/tr>/gs)) {
    const cells = [...(m[1] ?? "").matchAll(/<td[^>]*>(.*?)<\/td>/gs)].map((c) => c[1] ?? "");
    if (cells[0] === first) return cells;
  }
  return null;
}

/** The ops page's breaker row of one dependency, by column. */
function breakerRow(html: string, dependency: string): Record<string, string> {
  const cols = [
    "dependency",
    "state",
    "timeoutMs",
    "calls",
    "failures",
    "timeouts",
    "rejected",
    "opened",
    "lastOpenedAt",
    "lastFailure",
    "retryAfterSeconds",
  ];
  const cells = rowOf(html, dependency) ?? [];
  return Object.fromEntries(cols.map((c, i) => [c, cells[i] ?? ""]));
}

async function login(token: string, headers: Record<string, string> = FORM, app: TestApp = t): Promise<Response> {
  return await app.app.request("/console/login", { method: "POST", headers, body: form({ token }) });
}

/** Signs in; returns the cookie header and the session's CSRF token (read from a page's form). */
async function signIn(app: TestApp = t): Promise<{ cookie: string; csrf: string }> {
  const res = await login(app.deps.config.ADMIN_TOKEN, FORM, app);
  const value = /cityhub_console=([^;]+)/.exec(res.headers.get("set-cookie") ?? "")?.[1];
  if (!value) throw new Error("no session cookie");
  const cookie = `${SESSION_COOKIE}=${value}`;
  const html = await (await app.app.request("/console/orders", { headers: { cookie } })).text();
  const csrf = /name="_csrf" value="([0-9a-f]+)"/.exec(html)?.[1];
  if (!csrf) throw new Error("no CSRF token on the page");
  return { cookie, csrf };
}

function seckillFields(shopId: number, title: string): Record<string, string> {
  return {
    shopId: String(shopId),
    title,
    subTitle: "console test",
    rules: "one per person",
    payValue: "8000",
    actualValue: "10000",
    stock: "20",
    beginTime: "2026-01-01T08:00:00Z",
    endTime: `${new Date(Date.now() + 86_400_000).toISOString().slice(0, 19)}Z`,
    buckets: "2",
    shopDailyLimit: "0",
  };
}

async function vouchersTitled(title: string): Promise<number> {
  return Number(
    (
      (await t.deps.db.execute("SELECT COUNT(*) AS n FROM tb_voucher WHERE title = ?", [title])).rows[0] as {
        n: string | number;
      }
    ).n,
  );
}

describe("console sign-in", () => {
  test("the operator token sets an HttpOnly, SameSite=Strict cookie on /console that is not the token", async () => {
    const res = await login(t.deps.config.ADMIN_TOKEN);
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe("/console");
    const setCookie = res.headers.get("set-cookie") ?? "";
    expect(setCookie).toContain(`${SESSION_COOKIE}=`);
    expect(setCookie).toContain("HttpOnly");
    expect(setCookie).toContain("SameSite=Strict");
    expect(setCookie).toContain("Path=/console");
    expect(setCookie).not.toContain("Secure"); // PUBLIC_URL is http in tests
    const value = /cityhub_console=([^;]+)/.exec(setCookie)?.[1] ?? "";
    expect(value.length).toBeGreaterThan(40);
    expect(value).not.toContain(t.deps.config.ADMIN_TOKEN);
    expect(decodeURIComponent(value)).not.toContain(t.deps.config.ADMIN_TOKEN);
    const page = await t.app.request("/console", { headers: { cookie: `${SESSION_COOKIE}=${value}` } });
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("Seckill sales");
  });

  test("the cookie is Secure when PUBLIC_URL is https", async () => {
    const secure = await createTestApp({ PUBLIC_URL: "https://console.example" });
    const res = await secure.app.request("/console/login", {
      method: "POST",
      headers: { ...FORM, origin: "https://console.example" },
      body: form({ token: secure.deps.config.ADMIN_TOKEN }),
    });
    expect(res.status).toBe(303);
    expect(res.headers.get("set-cookie")).toContain("Secure");
  });

  test("a user session token or a wrong token cannot sign in, and no cookie is set", async () => {
    const { token } = await loginAs(t.app, t.deps);
    for (const bad of [token, `Bearer ${token}`, "wrong", `${t.deps.config.ADMIN_TOKEN}x`, ""]) {
      const res = await login(bad);
      expect([bad, res.status]).toEqual([bad, 401]);
      expect(res.headers.get("set-cookie")).toBeNull();
    }
  });

  test("a login form from another origin is refused", async () => {
    const res = await login(t.deps.config.ADMIN_TOKEN, { ...FORM, origin: "https://evil.example" });
    expect(res.status).toBe(403);
    expect(res.headers.get("set-cookie")).toBeNull();
  });

  test("an Origin matching the request's own Host but not PUBLIC_URL is refused (the Host header is the client's word)", async () => {
    // A rebound DNS name, or a proxy passing the client's Host: the request's URL names that host,
    // and an Origin equal to it proves nothing. Only the configured PUBLIC_URL is the console's origin.
    const forged = await t.app.request("http://rebound.example/console/login", {
      method: "POST",
      headers: { ...FORM, origin: "http://rebound.example", host: "rebound.example" },
      body: form({ token: t.deps.config.ADMIN_TOKEN }),
    });
    expect(forged.status).toBe(403);
    expect(forged.headers.get("set-cookie")).toBeNull();
    const { cookie, csrf } = await signIn();
    const post = await t.app.request("http://rebound.example/console/ops/reconcile", {
      method: "POST",
      headers: { ...FORM, cookie, origin: "http://rebound.example", host: "rebound.example" },
      body: form({ _csrf: csrf }),
    });
    expect(post.status).toBe(403);
    expect(await post.text()).toContain("not sent from the console&#39;s own pages");
  });

  test("no console page is reached without a valid session: user tokens, the raw admin token, forged or expired cookies redirect to the login form", async () => {
    const { token } = await loginAs(t.app, t.deps);
    const { cookie } = await signIn();
    const value = cookie.split("=")[1] ?? "";
    const [v, , nonce, mac] = value.split(".");
    const forged = [
      `${SESSION_COOKIE}=${token}`,
      `${SESSION_COOKIE}=${t.deps.config.ADMIN_TOKEN}`,
      `${SESSION_COOKIE}=${v}.${Date.now() + 10 ** 9}.${nonce}.${mac}`, // expiry pushed out: the mac no longer matches
      `${SESSION_COOKIE}=${v}.${Date.now() - 1000}.${nonce}.${mac}`,
    ];
    const sale = await createSeckill(t, { stock: 3 });
    for (const path of [...PAGES, `/console/sale/${sale.voucherId}`]) {
      const variants: Record<string, string>[] = [
        {},
        { authorization: `Bearer ${t.deps.config.ADMIN_TOKEN}` },
        { authorization: token },
        ...forged.map((c) => ({ cookie: c })),
      ];
      for (const headers of variants) {
        const res = await t.app.request(path, { headers });
        expect([path, res.status, res.headers.get("location")]).toEqual([path, 302, "/console/login"]);
      }
    }
    const events = await t.app.request(`/console/sale/${sale.voucherId}/events`, {
      headers: { cookie: forged[0] ?? "" },
    });
    expect(events.status).toBe(401);
    const post = await t.app.request("/console/ops/reconcile", {
      method: "POST",
      headers: { ...FORM, authorization: `Bearer ${t.deps.config.ADMIN_TOKEN}` },
      body: "",
    });
    expect(post.status).toBe(401);
  });

  test("sign-out (CSRF-checked) clears the cookie", async () => {
    const { cookie, csrf } = await signIn();
    const res = await t.app.request("/console/logout", {
      method: "POST",
      headers: { ...FORM, cookie },
      body: form({ _csrf: csrf }),
    });
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toBe("/console/login");
    expect(res.headers.get("set-cookie")).toMatch(/cityhub_console=;.*Max-Age=0/);
    // Server-side too: a copy of the cookie kept by someone no longer works, in any isolate.
    const other = await createTestApp();
    for (const app of [t, other])
      expect((await app.app.request("/console/orders", { headers: { cookie } })).status).toBe(302);
  });

  test("an operator can sign out every console session at once (POST /admin/console/revoke-sessions)", async () => {
    const clock = { ms: Date.now(), now: () => clock.ms };
    const app = await createTestApp({}, { clock });
    const a = await signIn(app);
    expect((await app.app.request("/console/orders", { headers: { cookie: a.cookie } })).status).toBe(200);
    clock.ms += 10;
    const res = await call(app.app, "POST", "/admin/console/revoke-sessions", {
      token: `Bearer ${app.deps.config.ADMIN_TOKEN}`,
    });
    expect(res.body.success).toBe(true);
    expect((await app.app.request("/console/orders", { headers: { cookie: a.cookie } })).status).toBe(302);
    // A session issued after the revocation works.
    clock.ms += 10;
    const b = await signIn(app);
    expect((await app.app.request("/console/orders", { headers: { cookie: b.cookie } })).status).toBe(200);
    // The epoch is global: leave the shared test Redis as other files expect it.
    await app.deps.redis.del(keys.consoleEpoch());
  });

  test("console pages carry a Content-Security-Policy that allows only their own scripts", async () => {
    const { cookie } = await signIn();
    for (const path of ["/console/login", "/console/ops"]) {
      const res = await t.app.request(path, { headers: { cookie } });
      const csp = res.headers.get("content-security-policy") ?? "";
      expect(csp).toContain("script-src 'self'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).not.toMatch(/script-src[^;]*unsafe-inline/);
    }
  });

  test("failed operator sign-ins are limited per address, on the console and on /admin alike", async () => {
    const app = await createTestApp({ OPERATOR_AUTH_FAILURES: "3", OPERATOR_AUTH_WINDOW_SECONDS: "600" });
    const ip = `10.77.${Math.floor(Math.random() * 250)}.${1 + Math.floor(Math.random() * 250)}`;
    const guess = (token: string) =>
      app.app.request("/console/login", { method: "POST", headers: FORM, body: form({ token }) }, { clientIp: ip });
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await guess(`wrong-${i}`)).status);
    statuses.push((await call(app.app, "GET", "/admin/cache", { token: "Bearer wrong-again", ip })).status);
    expect(statuses).toEqual([401, 401, 401, 429]);
    // Blocked: even the right token from that address waits.
    const right = await guess(app.deps.config.ADMIN_TOKEN);
    expect(right.status).toBe(429);
    expect(Number(right.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(
      (await call(app.app, "GET", "/admin/cache", { token: `Bearer ${app.deps.config.ADMIN_TOKEN}`, ip })).status,
    ).toBe(429);
    // Another address is not affected.
    expect(
      (await call(app.app, "GET", "/admin/cache", { token: `Bearer ${app.deps.config.ADMIN_TOKEN}`, ip: "10.78.0.1" }))
        .status,
    ).toBe(200);
  });

  test("ADMIN_TOKEN must be at least 32 characters", async () => {
    const { parseEnv } = await import("../../src/env.ts");
    expect(() => parseEnv({ ...t.stack.env, ADMIN_TOKEN: "x".repeat(31) })).toThrow(
      /ADMIN_TOKEN must be at least 32 characters/,
    );
    expect(() => parseEnv({ ...t.stack.env, ADMIN_TOKEN: "x".repeat(32) })).not.toThrow();
  });
});

describe("console forms", () => {
  test("a POST without, with a wrong CSRF token, or from another origin is refused and writes nothing", async () => {
    const { cookie, csrf } = await signIn();
    const other = await signIn();
    const shopId = await createShop(t, await createShopType(t));
    const title = `csrf-${crypto.randomUUID().slice(0, 8)}`;
    const fields = seckillFields(shopId, title);
    const attempts: [string, Record<string, string>, Record<string, string>][] = [
      ["no token", { ...FORM, cookie }, fields],
      ["wrong token", { ...FORM, cookie }, { ...fields, _csrf: "0".repeat(64) }],
      ["another session's token", { ...FORM, cookie }, { ...fields, _csrf: other.csrf }],
      ["other origin", { ...FORM, cookie, origin: "https://evil.example" }, { ...fields, _csrf: csrf }],
      ["no origin", { "content-type": FORM["content-type"], cookie }, { ...fields, _csrf: csrf }],
      [
        "cross-site fetch metadata",
        { "content-type": FORM["content-type"], cookie, "sec-fetch-site": "cross-site" },
        { ...fields, _csrf: csrf },
      ],
    ];
    for (const [what, headers, body] of attempts) {
      for (const path of ["/console/vouchers/seckill", "/console/vouchers"]) {
        const res = await t.app.request(path, { method: "POST", headers, body: form(body) });
        expect([what, path, res.status]).toEqual([what, path, 403]);
      }
    }
    const run = await t.app.request("/console/ops/reconcile", {
      method: "POST",
      headers: { ...FORM, cookie },
      body: form({ _csrf: "nope" }),
    });
    expect(run.status).toBe(403);
    expect(await vouchersTitled(title)).toBe(0);
  });

  test("creating a seckill voucher through the form writes it and loads Redis; the sale page follows", async () => {
    const { cookie, csrf } = await signIn();
    const shopId = await createShop(t, await createShopType(t));
    const title = `form-${crypto.randomUUID().slice(0, 8)}`;
    const res = await t.app.request("/console/vouchers/seckill", {
      method: "POST",
      headers: { ...FORM, cookie },
      body: form({ ...seckillFields(shopId, title), _csrf: csrf }),
    });
    expect(res.status).toBe(303);
    const voucherId = Number(/^\/console\/sale\/(\d+)$/.exec(res.headers.get("location") ?? "")?.[1]);
    expect(voucherId).toBeGreaterThan(0);
    const row = (
      await t.deps.db.execute(
        "SELECT v.title, v.sub_title, v.rules, v.type, s.stock, c.buckets FROM tb_voucher v JOIN tb_seckill_voucher s ON s.voucher_id = v.id JOIN tb_seckill_config c ON c.voucher_id = v.id WHERE v.id = ?",
        [voucherId],
      )
    ).rows[0] as Record<string, string | number>;
    expect({ ...row, type: Number(row.type), stock: Number(row.stock), buckets: Number(row.buckets) } as Record<
      string,
      unknown
    >).toEqual({ title, sub_title: "console test", rules: "one per person", type: 1, stock: 20, buckets: 2 });
    const page = await t.app.request(`/console/sale/${voucherId}`, { headers: { cookie } });
    expect(page.status).toBe(200);
    expect(await page.text()).toContain(`data-events="/console/sale/${voucherId}/events"`);
    const list = await (await t.app.request("/console/vouchers", { headers: { cookie } })).text();
    expect(list).toContain(title);
    expect(list).toContain("on sale");
  });

  test("purchase-limit rules entered in the form are stored and loaded like the API's", async () => {
    const { cookie, csrf } = await signIn();
    const shopId = await createShop(t, await createShopType(t));
    const title = `rules-${crypto.randomUUID().slice(0, 8)}`;
    const fields = {
      ...seckillFields(shopId, title),
      shopRuleLimit: "3",
      shopRuleDays: "7",
      campaign: "spring",
      campaignRuleLimit: "1",
      campaignRuleDays: "30",
      _csrf: csrf,
    };
    const res = await t.app.request("/console/vouchers/seckill", {
      method: "POST",
      headers: { ...FORM, cookie },
      body: form(fields),
    });
    expect(res.status).toBe(303);
    const voucherId = Number(/^\/console\/sale\/(\d+)$/.exec(res.headers.get("location") ?? "")?.[1]);
    const row = (
      await t.deps.db.execute("SELECT campaign, purchase_rules FROM tb_seckill_config WHERE voucher_id = ?", [
        voucherId,
      ])
    ).rows[0] as { campaign: string; purchase_rules: string };
    expect(row.campaign).toBe("spring");
    expect(JSON.parse(row.purchase_rules)).toEqual([
      { scope: "shop", limit: 3, days: 7 },
      { scope: "campaign", limit: 1, days: 30 },
    ]);
    expect(await t.deps.redis.hget(keys.seckill.meta(shopId, voucherId), "rules")).toBe("shop:3:7,campaign:1:30");
  });

  test("creating a normal voucher through the form works", async () => {
    const { cookie, csrf } = await signIn();
    const shopId = await createShop(t, await createShopType(t));
    const title = `normal-${crypto.randomUUID().slice(0, 8)}`;
    const res = await t.app.request("/console/vouchers", {
      method: "POST",
      headers: { ...FORM, cookie },
      body: form({ shopId: String(shopId), title, payValue: "100", actualValue: "200", _csrf: csrf }),
    });
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toMatch(/^\/console\/vouchers\?created=\d+$/);
    expect(await vouchersTitled(title)).toBe(1);
  });

  test("a bad field is a 400 page with its error next to the field, and no row is written", async () => {
    const { cookie, csrf } = await signIn();
    const shopId = await createShop(t, await createShopType(t));
    const cases: [string, Record<string, string>][] = [
      ["stock", { stock: "lots" }],
      ["endTime", { endTime: "2026-01-01T08:00:00Z" }],
      ["beginTime", { beginTime: "2026-02-30T08:00:00" }],
      ["buckets", { stock: "2", buckets: "3" }],
      ["shopId", { shopId: "999999999" }],
      ["payValue", { payValue: "12.5" }],
      ["shopRuleDays", { shopRuleLimit: "2" }],
      ["shopRuleLimit", { shopRuleLimit: "1000000", shopRuleDays: "7" }],
      ["campaign", { campaignRuleLimit: "2", campaignRuleDays: "7" }],
      ["campaign", { campaign: "summer" }],
      ["campaign", { campaign: "a:b", campaignRuleLimit: "2", campaignRuleDays: "7" }],
      ["campaignRuleDays", { campaign: "summer", campaignRuleLimit: "2", campaignRuleDays: "400" }],
    ];
    for (const [field, change] of cases) {
      const title = `bad-${crypto.randomUUID().slice(0, 8)}`;
      const res = await t.app.request("/console/vouchers/seckill", {
        method: "POST",
        headers: { ...FORM, cookie },
        body: form({ ...seckillFields(shopId, title), ...change, _csrf: csrf }),
      });
      expect([field, res.status]).toEqual([field, 400]);
      const html = await res.text();
      // The message sits right after its own input, and the form keeps what was typed.
      expect([
        field,
        new RegExp(
          `<input id="seckill-${field}"[^>]*aria-invalid="true"[^>]*/?><p class="err" id="seckill-${field}-err" data-field="${field}">[^<]+</p>`,
        ).test(html),
      ]).toEqual([field, true]);
      expect(html.match(/data-field="/g)?.length).toBe(1);
      expect(html).toContain(`value="${title}"`);
      expect(await vouchersTitled(title)).toBe(0);
    }
  });
});

describe("live sale view", () => {
  test("the event stream sends the sale's numbers: stock per bucket, reservations, orders, outbox and this isolate's outcomes", async () => {
    const { cookie } = await signIn();
    const sale = await createSeckill(t, { stock: 5, buckets: 2 });
    const ids = userIds(2);
    const tokens = await sessionsFor(t, ids);
    for (const token of [tokens[0], tokens[0], tokens[1]]) {
      const r = await call(t.app, "POST", `/api/voucher-order/seckill/${sale.voucherId}`, { token: token ?? "" });
      expect(r.status).toBe(200);
    }
    const res = await t.app.request(`/console/sale/${sale.voucherId}/events`, { headers: { cookie } });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const dec = new TextDecoder();
    let buf = "";
    let event: string | undefined;
    while (!event) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      event = buf.split("\n\n").find((e) => e.includes("event: stats"));
    }
    await reader.cancel();
    const data = JSON.parse(/^data: (.*)$/m.exec(event ?? "")?.[1] ?? "null");
    expect(data).toMatchObject({
      voucherId: sale.voucherId,
      shopId: sale.shopId,
      initial: 5,
      stockLeft: 3,
      reservations: 2,
      state: "on sale",
    });
    expect(data.buckets).toHaveLength(2);
    expect(data.buckets[0] + data.buckets[1]).toBe(3);
    expect(data.outcomes).toMatchObject({ ok: 2, SOLD_OUT: 0 });
    // The buyer's repeat is answered from memory: by the fast lane before routing, or by the routed handler.
    expect(data.outcomes.DUPLICATE_ORDER + data.fastLaneSeckill).toBeGreaterThanOrEqual(1);
    expect(typeof data.ordersInMysql).toBe("number");
    expect(data.outboxPending + data.ordersInMysql).toBeGreaterThanOrEqual(2);
    expect(typeof data.writerLagMs).toBe("number");
  });

  test("a sharded sale's page lists its shards (stock, buyers and share, kept live by their data-k keys) and its events carry them; an unsharded page has none and keeps its keys; an app without the shards says so", async () => {
    const shards = await getShardStack(4);
    const app = await createTestApp({
      ...shards.env,
      SECKILL_USER_LIMIT: "0",
      SECKILL_IP_LIMIT: "0",
      ORDER_PAY_TIMEOUT_SECONDS: "86400",
    });
    const sale = await createSeckill(app, { stock: 9 });
    try {
      for (const token of await sessionsFor(app, userIds(5)))
        expect(
          (await call(app.app, "POST", `/api/voucher-order/seckill/${sale.voucherId}`, { token })).body.success,
        ).toBe(true);
      await app.settle();
      const { cookie } = await signIn(app);
      const html = await (await app.app.request(`/console/sale/${sale.voucherId}`, { headers: { cookie } })).text();
      /** The number a data-k cell shows, or null. */
      const cell = (k: string) => {
        const m = new RegExp(`data-k="${k}">(\\d+)<`).exec(html);
        return m ? Number(m[1]) : null;
      };
      expect(html).toContain('<table id="shards">');
      const perShard = [0, 1, 2, 3].map((i) => ({
        stock: cell(`shard-${i}-stock`),
        buyers: cell(`shard-${i}-buyers`),
        share: cell(`shard-${i}-share`),
      }));
      expect(
        perShard.every((x) => x.stock !== null && x.buyers !== null && x.share === (x.stock ?? 0) + (x.buyers ?? 0)),
      ).toBe(true);
      expect(perShard.reduce((a, x) => a + (x.buyers ?? 0), 0)).toBe(5);
      expect({
        stockLeft: cell("stockLeft"),
        reservations: cell("reservations"),
        okOutcomes: cell("o-ok"),
        soldOut: cell("o-SOLD_OUT"),
      }).toEqual({ stockLeft: 4, reservations: 5, okOutcomes: 5, soldOut: 0 });
      for (const k of ["ordersInMysql", "state"]) expect([k, html.includes(`data-k="${k}"`)]).toEqual([k, true]);

      const res = await app.app.request(`/console/sale/${sale.voucherId}/events`, { headers: { cookie } });
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const dec = new TextDecoder();
      let buf = "";
      while (!buf.includes("event: stats")) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
      }
      await reader.cancel();
      const data = JSON.parse(
        /^data: (.*)$/m.exec(buf.split("\n\n").find((e) => e.includes("event: stats")) ?? "")?.[1] ?? "null",
      );
      expect({
        shardCount: data.shardCount,
        shards: data.shards.map((x: { shard: number }) => x.shard),
        stockLeft: data.stockLeft,
        reservations: data.reservations,
      }).toEqual({ shardCount: 4, shards: [0, 1, 2, 3], stockLeft: 4, reservations: 5 });
      expect(data.outboxPending + data.ordersInMysql).toBeGreaterThanOrEqual(5);

      const plain = await createSeckill(t, { stock: 2 });
      const own = await signIn();
      const unsharded = await (
        await t.app.request(`/console/sale/${plain.voucherId}`, { headers: { cookie: own.cookie } })
      ).text();
      expect(unsharded).not.toContain('id="shards"');
      for (const k of ["stockLeft", "reservations", "ordersInMysql", "state", "o-ok", "o-SOLD_OUT"])
        expect([k, unsharded.includes(`data-k="${k}"`)]).toEqual([k, true]);
      // This app has no shards configured: the sale cannot be read here, and the page says why.
      const elsewhere = await t.app.request(`/console/sale/${sale.voucherId}`, { headers: { cookie: own.cookie } });
      expect(elsewhere.status).toBe(503);
      expect(await elsewhere.text()).toContain(`voucher ${sale.voucherId} lives in 4 seckill shards, 0 configured`);
    } finally {
      // Later test files run jobs on apps without these shards: the sale leaves the registry.
      const end = Date.now() - RETIRE_AFTER_MS - 86_400_000;
      await app.deps.db.execute("UPDATE tb_seckill_voucher SET begin_time = ?, end_time = ? WHERE voucher_id = ?", [
        toSqlUtc(end - 3_600_000),
        toSqlUtc(end),
        sale.voucherId,
      ]);
      await app.deps.db.execute("UPDATE tb_voucher_order SET status = 4 WHERE status = 1 AND voucher_id = ?", [
        sale.voucherId,
      ]);
    }
  });

  test("over a real Bun server the stream keeps ticking (an event a second) until the client goes away", async () => {
    const served = await serveTestApp();
    try {
      const sale = await createSeckill(served, { stock: 3 });
      const login = await fetch(`${served.url}/console/login`, {
        method: "POST",
        redirect: "manual",
        headers: { ...FORM, origin: served.url },
        body: form({ token: served.deps.config.ADMIN_TOKEN }),
      });
      const cookie = (login.headers.get("set-cookie") ?? "").split(";")[0] ?? "";
      const abort = new AbortController();
      const res = await fetch(`${served.url}/console/sale/${sale.voucherId}/events`, {
        headers: { cookie },
        signal: abort.signal,
      });
      expect(res.status).toBe(200);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      const dec = new TextDecoder();
      let buf = "";
      const stats = () => buf.split("\n\n").filter((e) => e.includes("event: stats"));
      while (stats().length < 2) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
      }
      abort.abort();
      const [a, b] = stats().map(
        (e) => JSON.parse(/^data: (.*)$/m.exec(e)?.[1] ?? "null") as { at: number; stockLeft: number },
      );
      expect(a?.stockLeft).toBe(3);
      expect((b?.at ?? 0) - (a?.at ?? 0)).toBeGreaterThanOrEqual(900);
    } finally {
      await served.stop();
    }
  }, 15_000);

  test("the sale page names the voucher's campaign and purchase limits (from its cached config)", async () => {
    const { cookie } = await signIn();
    const sale = await createSeckill(t, {
      stock: 3,
      shopDailyLimit: 2,
      purchaseRules: [
        { scope: "campaign", limit: 1, days: 30 },
        { scope: "shop", limit: 4, days: 7 },
      ],
      campaign: "autumn-26",
    });
    const html = await (await t.app.request(`/console/sale/${sale.voucherId}`, { headers: { cookie } })).text();
    const limits = /data-k="limits">([^<]*)</.exec(html)?.[1] ?? "";
    expect(limits).toContain("Campaign: autumn-26.");
    expect(limits).toContain("at most 2 seckill order(s) per user per service day in this shop");
    // Canonical order: shop rule, then campaign rule.
    expect(limits).toMatch(
      /shop rule: at most 4 per user over 7 days.*campaign &quot;autumn-26&quot; rule: at most 1 per user over 30 days/,
    );
    const plain = await createSeckill(t, { stock: 1 });
    const none = /data-k="limits">([^<]*)</.exec(
      await (await t.app.request(`/console/sale/${plain.voucherId}`, { headers: { cookie } })).text(),
    )?.[1];
    expect(none).toContain("Campaign: none. Purchase limits besides one order per buyer: none.");
  });

  test("a voucher that is not a seckill one is a 404", async () => {
    const { cookie } = await signIn();
    expect((await t.app.request("/console/sale/999999999", { headers: { cookie } })).status).toBe(404);
    expect((await t.app.request("/console/sale/999999999/events", { headers: { cookie } })).status).toBe(404);
  });
});

describe("operations", () => {
  test("run now (CSRF-checked) stores a fresh reconcile report shown on the page", async () => {
    const { cookie, csrf } = await signIn();
    const sale = await createSeckill(t, { stock: 4 });
    const res = await t.app.request("/console/ops/reconcile", {
      method: "POST",
      headers: { ...FORM, cookie },
      body: form({ _csrf: csrf }),
    });
    expect(res.status).toBe(303);
    expect(res.headers.get("location")).toMatch(/^\/console\/ops\?reconcile=(ran|busy)$/);
    const html = await (await t.app.request(res.headers.get("location") ?? "", { headers: { cookie } })).text();
    expect(html).toContain("Cache hit rates per module");
    expect(html).toContain("Unique visitors per day");
    if (res.headers.get("location")?.endsWith("ran")) expect(html).toContain(`<td class="n">${sale.voucherId}</td>`);
  });

  test("a dependency's breaker opened by failures shows on the ops page: state, failures, last opening and failure, retry-after — the same numbers as GET /admin/resilience", async () => {
    // Its own isolate: the breaker stays open for the rest of this app's life.
    const b = await createTestApp({ BREAKER_MIN_CALLS: "9", BREAKER_HALF_OPEN_AFTER_MS: "60000" });
    const { cookie } = await signIn(b);
    const before = breakerRow(await (await b.app.request("/console/ops", { headers: { cookie } })).text(), "sms");
    expect(before).toMatchObject({ state: "closed", failures: "0", retryAfterSeconds: "0", lastOpenedAt: "" });
    // Three failed calls through the SMS guard's own transport wrapper: a gateway that answers 502.
    const gateway = b.deps.isolate.resilience.sms.fetch(
      (async () => new Response("bad gateway", { status: 502 })) as unknown as typeof fetch,
    );
    for (let i = 0; i < 3; i++) expect((await gateway("http://sms.invalid/send")).status).toBe(502);
    await expect(gateway("http://sms.invalid/send")).rejects.toThrow("sms unavailable (circuit open)");
    const html = await (await b.app.request("/console/ops", { headers: { cookie } })).text();
    const row = breakerRow(html, "sms");
    expect(row).toMatchObject({
      state: "open",
      calls: "4",
      failures: "3",
      timeouts: "0",
      rejected: "1",
      opened: "1",
      lastFailure: "HTTP 502",
    });
    expect(row.lastOpenedAt).toMatch(/^\d{4}-\d{2}-\d{2}/);
    expect(Number(row.retryAfterSeconds)).toBeGreaterThan(50);
    expect(html).toMatch(/data-k="breakers-open">Not closed: sms /);
    expect(breakerRow(html, "redis").state).toBe("closed");
    const admin = await call<Record<string, { state: string; failures: number; rejected: number }>>(
      b.app,
      "GET",
      "/admin/resilience",
      { token: `Bearer ${b.deps.config.ADMIN_TOKEN}` },
    );
    expect(admin.body.data?.sms).toMatchObject({ state: "open", failures: 3, rejected: 1 });
  });

  test("with Redis's breaker open the ops page still renders from memory: breakers and limiters shown, the Redis-backed sections named as unavailable", async () => {
    const b = await createTestApp({ BREAKER_MIN_CALLS: "2", BREAKER_HALF_OPEN_AFTER_MS: "60000" });
    const { cookie } = await signIn(b);
    const guard = b.deps.isolate.resilience.redis;
    for (let i = 0; i < 2; i++)
      await expect(guard.run(() => Promise.reject(new Error("connect ECONNREFUSED (injected)")))).rejects.toThrow(
        "redis unavailable",
      );
    expect(guard.state).toBe("open");
    const res = await b.app.request("/console/ops", { headers: { cookie } });
    expect(res.status).toBe(200);
    const html = await res.text();
    expect(breakerRow(html, "redis")).toMatchObject({
      state: "open",
      failures: String(guard.snapshot().failures),
      lastFailure: "connect ECONNREFUSED (injected)",
    });
    expect(html).toMatch(/data-k="unavailable">[^<]*reconcile report: redis unavailable \(circuit open\)/);
    expect(html).toContain("Seckill admission");
  });

  test("a key hammered in this isolate is promoted and shows on the ops page as hot, marked promoted here", async () => {
    const { cookie } = await signIn();
    const shopId = await createShop(t, await createShopType(t));
    const shops = t.deps.isolate.caches.shop;
    // The first flush after a cache read anchors the write-log cursor; nothing is promoted before it.
    expect((await call(t.app, "GET", `/api/shop/${shopId}`)).status).toBe(200);
    await t.deps.isolate.caches.metrics.flush(t.deps);
    for (let i = 0; i < 500 && !shops.isPromoted(shopId); i++)
      expect((await call(t.app, "GET", `/api/shop/${shopId}`)).status).toBe(200);
    expect(shops.isPromoted(shopId)).toBe(true);
    const html = await (await t.app.request("/console/ops", { headers: { cookie } })).text();
    expect(html).toMatch(new RegExp(`data-k="promoted-here">[^<]*\\b${shops.name}:${shopId}\\b`));
    // Hot-key rows are (module, key, reads, isolates, promotedHere); the hit-rate table's rows also start with the module.
    const hotRow = [...html.matchAll(/<tr>(.*?)<\/tr>/gs)]
      .map((m) => [...(m[1] ?? "").matchAll(/<td[^>]*>(.*?)<\/td>/gs)].map((c) => c[1]))
      .find((cells) => cells[0] === shops.name && cells[1] === String(shopId));
    expect(hotRow?.[4]).toBe("yes");
    expect(Number(hotRow?.[2])).toBeGreaterThanOrEqual(1);
    // The same report as GET /admin/cache/hot.
    const admin = await call<{ top: { module: string; key: string }[] }>(t.app, "GET", "/admin/cache/hot", {
      token: `Bearer ${t.deps.config.ADMIN_TOKEN}`,
    });
    expect(admin.body.data?.top.some((k) => k.module === shops.name && k.key === String(shopId))).toBe(true);
  });

  test("the limiters of this isolate: an address over the listing limit is counted as blocked, and a voucher's admission gate is listed", async () => {
    // Both limiters are off in tests unless asked for (tests/support/stack.ts).
    const b = await createTestApp({
      LISTING_IP_LIMIT: "3",
      LISTING_SYNC_MS: "60000",
      SECKILL_ADMISSION_PER_SECOND: "100",
    });
    const { cookie } = await signIn(b);
    const ip = "203.0.113.77";
    for (let i = 0; i < 3; i++) expect((await call(b.app, "GET", "/api/shop/of/name?name=x", { ip })).status).toBe(200);
    expect((await call(b.app, "GET", "/api/shop/of/name?name=x", { ip })).status).toBe(429);
    const sale = await createSeckill(b, { stock: 2 });
    const [uid] = userIds(1);
    const [token] = await sessionsFor(b, [uid ?? 0]);
    expect(
      (await call(b.app, "POST", `/api/voucher-order/seckill/${sale.voucherId}`, { token: token ?? "" })).body.success,
    ).toBe(true);
    const html = await (await b.app.request("/console/ops", { headers: { cookie } })).text();
    expect(html).toMatch(/data-k="listing-blocked">1</);
    expect(rowOf(html, ip)?.[2]).toBe("true");
    expect(Number(/data-k="listing-tracked">(\d+)</.exec(html)?.[1])).toBeGreaterThanOrEqual(1);
    // (voucherId, tokens, spent, seen, leasing): the second of the attempt may be over by now.
    expect(rowOf(html, String(sale.voucherId))?.length).toBe(5);
    expect(html).toContain("At most 100 attempts per second per voucher");
  });

  test("order lookup by id and by user", async () => {
    const { cookie } = await signIn();
    const sale = await createSeckill(t, { stock: 2 });
    const [uid] = userIds(1);
    const [token] = await sessionsFor(t, [uid ?? 0]);
    const r = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${sale.voucherId}`, { token: token ?? "" });
    const orderId = r.body.data ?? "";
    const byId = await (await t.app.request(`/console/orders?id=${orderId}`, { headers: { cookie } })).text();
    expect(byId).toContain(`<td>${orderId}</td>`);
    expect(byId).toContain("queued (in the outbox)");
    // By user: MySQL rows only. In-process the writer's QStash delivery has nowhere to go, so the
    // test writes the reservation itself, through the writer's single-order entry point.
    const reservation = await findReservation(t.deps, orderId);
    expect(reservation?.userId).toBe(uid as number);
    if (reservation) await writeOrder(t.deps, reservation);
    const byUser = await (await t.app.request(`/console/orders?userId=${uid}`, { headers: { cookie } })).text();
    expect(byUser).toContain(`<td>${orderId}</td>`);
    expect(byUser).toContain("unpaid");
    expect((await t.app.request("/console/orders?id=abc", { headers: { cookie } })).status).toBe(400);
  });
});

describe("assets", () => {
  test("pages load nothing from outside the app: every src and href is same-origin and answers 200", async () => {
    const { cookie } = await signIn();
    const sale = await createSeckill(t, { stock: 2 });
    const urls = new Set<string>();
    for (const path of ["/console/login", ...PAGES, `/console/sale/${sale.voucherId}`]) {
      const res = await t.app.request(path, { headers: { cookie } });
      expect([path, res.status]).toEqual([path, 200]);
      const html = await res.text();
      expect([path, /https?:\/\//.test(html)]).toEqual([path, false]);
      // The page's icon is the empty data URL: nothing is fetched, and no /favicon.ico is asked for.
      expect([path, html.includes('<link rel="icon" href="data:,"/>')]).toEqual([path, true]);
      for (const m of html.matchAll(/\b(?:src|href|action)="([^"]*)"/g)) {
        const url = m[1] ?? "";
        if (url === NO_ICON) continue;
        expect([path, url.startsWith("/") && !url.startsWith("//")]).toEqual([path, true]);
        if (/\.(js|css)$/.test(url)) urls.add(url);
      }
    }
    expect([...urls].sort()).toEqual([
      "/console/assets/console.css",
      "/console/assets/sale.js",
      "/console/assets/uPlot.iife.min.js",
      "/console/assets/uPlot.min.css",
    ]);
    for (const url of urls) {
      const res = await t.app.request(url);
      expect([url, res.status]).toEqual([url, 200]);
      expect(res.headers.get("content-type")).toMatch(/^text\/(css|javascript)/);
      expect((await res.arrayBuffer()).byteLength).toBeGreaterThan(500);
    }
    expect((await t.app.request("/console/assets/../package.json")).status).toBe(404);
    expect((await t.app.request("/console/assets/uPlot.cjs.js")).status).toBe(404);
  });
});

describe("dead letters", () => {
  let target: FailingTarget;
  beforeAll(() => {
    target = startFailingTarget();
  });
  afterAll(async () => {
    await target.stop();
  });

  const page = async (cookie: string, url: string) =>
    await (await t.app.request(`/console/dlq?url=${encodeURIComponent(url)}`, { headers: { cookie } })).text();
  /** The cells of the page's row for one entry. */
  const cellsOf = (html: string, dlqId: string) => {
    const row = new RegExp(`<tr data-dlq="${dlqId}">(.*?)</tr>`, "s").exec(html)?.[1];
    return row ? [...row.matchAll(/<td[^>]*>(.*?)<\/td>/gs)].map((c) => c[1] ?? "") : null;
  };

  test("the page and its forms need a console session; its links, forms and files are all same-origin", async () => {
    expect((await t.app.request("/console/dlq")).status).toBe(302);
    for (const path of [
      "/console/dlq/x/retry",
      "/console/dlq/x/delete",
      "/console/dlq/retry-all",
      "/console/dlq/delete-all",
    ]) {
      expect([path, (await t.app.request(path, { method: "POST", headers: FORM, body: "" })).status]).toEqual([
        path,
        401,
      ]);
    }
    const { cookie } = await signIn();
    const url = target.url();
    await deadLetter(t, url);
    const html = await page(cookie, url);
    // The destinations are shown as text (they are http URLs); every src, href and action is ours.
    for (const m of html.matchAll(/\b(?:src|href|action)="([^"]*)"/g))
      expect(m[1] === NO_ICON || (m[1]?.startsWith("/") && !m[1].startsWith("//"))).toBe(true);
  });

  test("the page lists a failed message with its status and scrubbed answer; its re-drive form (CSRF-checked) delivers it again and empties the list", async () => {
    const { cookie, csrf } = await signIn();
    const url = target.url();
    await deadLetter(t, url);
    const [entry] = await deadLettersOf(t, url);
    const dlqId = entry?.dlqId ?? "";
    const html = await page(cookie, url);
    const cells = cellsOf(html, dlqId);
    expect(cells?.[3]).toBe("500");
    expect(cells?.[4]).toStartWith("upstream exploded; authorization: ***");
    expect(cells?.[5]).toContain("orderId");
    expect(html).not.toContain(SECRET);
    expect(html).not.toContain("hunter2");
    expect(html).toContain(`action="/console/dlq/${dlqId}/retry"`);
    const retry = (body: Record<string, string>, headers: Record<string, string> = FORM) =>
      t.app.request(`/console/dlq/${dlqId}/retry`, {
        method: "POST",
        headers: { ...headers, cookie },
        body: form(body),
      });
    // Without the session's token, or from another origin: refused, nothing re-driven.
    expect((await retry({})).status).toBe(403);
    expect((await retry({ _csrf: csrf }, { ...FORM, origin: "https://evil.example" })).status).toBe(403);
    expect(await deadLettersOf(t, url)).toHaveLength(1);
    target.heal(url);
    const res = await retry({ _csrf: csrf, url });
    expect(res.status).toBe(303);
    const back = res.headers.get("location") ?? "";
    expect(back).toBe(`/console/dlq?${new URLSearchParams({ url, done: "redriven" })}`);
    await eventually("the re-driven message delivered", async () => target.delivered(url).length === 1);
    const after = await (await t.app.request(back, { headers: { cookie } })).text();
    expect(after).toContain("Re-driven: QStash delivers a fresh copy now.");
    expect(after).toContain("No dead letters matching the filter.");
    // The entry is gone: its form now says so.
    const stale = await retry({ _csrf: csrf, url });
    expect(stale.headers.get("location")).toContain("done=missing");
  });

  test("delete one, and delete all of a destination only with the box ticked", async () => {
    const { cookie, csrf } = await signIn();
    const url = target.url();
    await deadLetter(t, url, 3);
    const [first] = await deadLettersOf(t, url);
    const post = (path: string, body: Record<string, string>) =>
      t.app.request(path, { method: "POST", headers: { ...FORM, cookie }, body: form({ _csrf: csrf, ...body }) });
    const del = await post(`/console/dlq/${first?.dlqId}/delete`, { url });
    expect(del.headers.get("location")).toContain("done=deleted");
    expect(await deadLettersOf(t, url)).toHaveLength(2);
    const unconfirmed = await post("/console/dlq/delete-all", { url });
    expect(unconfirmed.headers.get("location")).toContain("done=unconfirmed");
    expect(await deadLettersOf(t, url)).toHaveLength(2);
    const all = await post("/console/dlq/delete-all", { url, confirm: "yes" });
    const back = all.headers.get("location") ?? "";
    expect(back).toContain("done=deleted-all");
    expect(await (await t.app.request(back, { headers: { cookie } })).text()).toContain("Deleted 2 dead letter(s).");
    expect(await deadLettersOf(t, url)).toEqual([]);
    expect(target.delivered(url)).toEqual([]);
  });
});

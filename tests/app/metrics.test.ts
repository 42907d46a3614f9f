/**
 * GET /metrics read as Prometheus reads it: the answer is parsed by a text-format parser library
 * (parse-prometheus-text-format, prom2json's output shape), never matched by pattern, and its
 * figures are checked against the JSON the operator routes answer for the same moment.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import parsePrometheusTextFormat, { type ParsedFamily } from "parse-prometheus-text-format";
import * as S from "../../src/openapi/operator.ts";
import { DEPENDENCIES } from "../../src/resilience.ts";
import { OUTCOMES } from "../../src/services/sale-counters.ts";
import { call } from "../support/http.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";

let t: TestApp;
let token: string;
beforeAll(async () => {
  t = await createTestApp();
  token = `Bearer ${t.deps.config.ADMIN_TOKEN}`;
});

/** Scrapes /metrics as an operator and parses it; a parse failure fails the test. */
async function scrape(app: TestApp): Promise<Map<string, ParsedFamily>> {
  const res = await app.app.request("/metrics", { headers: { authorization: token } });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
  const families = parsePrometheusTextFormat(await res.text());
  return new Map(families.map((f) => [f.name, f]));
}

/** The value of the one sample of `name` whose labels include `labels` (throws when there is not exactly one). */
function sampleValue(
  families: Map<string, ParsedFamily>,
  name: string,
  labels: Record<string, string | number>,
): number {
  const want = Object.entries(labels).map(([k, v]) => [k, String(v)]);
  const hits = (families.get(name)?.metrics ?? []).filter((m) => want.every(([k, v]) => m.labels?.[k ?? ""] === v));
  if (hits.length !== 1) throw new Error(`${name} ${JSON.stringify(labels)}: ${hits.length} samples`);
  return Number(hits[0]?.value);
}

describe("GET /metrics", () => {
  test("operators only: no credential, a user's token or a wrong secret is a 401 envelope", async () => {
    const [user] = await sessionsFor(t, userIds(1));
    for (const auth of [undefined, user ?? "", "Bearer wrong"]) {
      const res = await call(t.app, "GET", "/metrics", auth === undefined ? {} : { token: auth });
      expect([auth, res.status, res.body.code]).toEqual([auth, 401, "UNAUTHORIZED"]);
    }
  });

  test("after a sale, its attempts by outcome, stock and buyers per shard match GET /admin/seckill/{id}", async () => {
    const sale = await createSeckill(t, { stock: 3, buckets: 2 });
    const tokens = await sessionsFor(t, userIds(5));
    const codes: string[] = [];
    for (const user of tokens) {
      const res = await call(t.app, "POST", `/api/voucher-order/seckill/${sale.voucherId}`, { token: user });
      codes.push(res.body.success ? "ok" : String(res.body.code));
    }
    // One attempt more by a buyer who already holds a unit.
    const again = await call(t.app, "POST", `/api/voucher-order/seckill/${sale.voucherId}`, { token: tokens[0] ?? "" });
    codes.push(String(again.body.code));
    expect(codes.sort()).toEqual(["DUPLICATE_ORDER", "SOLD_OUT", "SOLD_OUT", "ok", "ok", "ok"]);
    await t.settle();

    const m = await scrape(t);
    const res = await call(t.app, "GET", `/admin/seckill/${sale.voucherId}`, { token });
    const view = S.SeckillView.parse(res.body.data);
    const sold = { voucher_id: sale.voucherId, shop_id: sale.shopId };

    const attempts = Object.fromEntries(
      OUTCOMES.map((o) => [o, sampleValue(m, "cityhub_seckill_attempts_total", { ...sold, outcome: o })]),
    );
    expect(attempts).toMatchObject({ ok: 3, SOLD_OUT: 2, DUPLICATE_ORDER: 1, RATE_LIMITED: 0 });
    expect(m.get("cityhub_seckill_attempts_total")?.type).toBe("COUNTER");
    // The counters agree with the sale's state as the operator route reads it.
    expect(attempts.ok).toBe(view.sold);
    expect(attempts.ok).toBe(view.buyers);
    expect(sampleValue(m, "cityhub_seckill_sold", sold)).toBe(view.sold);
    expect(sampleValue(m, "cityhub_seckill_initial_stock", sold)).toBe(view.initialStock);
    for (const shard of view.shards) {
      expect(sampleValue(m, "cityhub_seckill_stock", { ...sold, shard: shard.shard })).toBe(shard.stock);
      expect(sampleValue(m, "cityhub_seckill_buyers", { ...sold, shard: shard.shard })).toBe(shard.buyers);
    }
    expect(sampleValue(m, "cityhub_seckill_state", { ...sold, state: view.state })).toBe(1);
    expect(sampleValue(m, "cityhub_seckill_state", { ...sold, state: "upcoming" })).toBe(0);
    // The three reservations wait in the shop's outbox (no writer runs in this test app).
    const pending = view.shards.reduce((a, s) => a + s.outbox.shopPending, 0);
    expect(sampleValue(m, "cityhub_outbox_pending", { shop_id: sale.shopId })).toBe(pending);
    expect(sampleValue(m, "cityhub_writer_lag_seconds", { shop_id: sale.shopId })).toBeGreaterThanOrEqual(0);
  });

  test("breakers, dependency guards and shedding per dependency, as GET /admin/resilience shows them; cache counters as GET /admin/cache", async () => {
    const m = await scrape(t);
    const resilience = (
      await call<Record<string, { state: string; calls: number; opened: number }>>(t.app, "GET", "/admin/resilience", {
        token,
      })
    ).body.data;
    for (const d of DEPENDENCIES) {
      const g = resilience?.[d];
      expect([d, sampleValue(m, "cityhub_breaker_state", { dependency: d, state: g?.state ?? "" })]).toEqual([d, 1]);
      expect([d, sampleValue(m, "cityhub_breaker_trips_total", { dependency: d })]).toEqual([d, g?.opened ?? -1]);
      // The scrape itself called Redis and MySQL after it read the guards: never fewer now.
      expect(sampleValue(m, "cityhub_dependency_calls_total", { dependency: d })).toBeLessThanOrEqual(g?.calls ?? -1);
    }
    expect(sampleValue(m, "cityhub_shed_requests_total", { reason: "in_flight" })).toBe(
      t.deps.isolate.shed.shed.inFlight,
    );
    for (const section of ["sales", "outbox", "cache"])
      expect([section, sampleValue(m, "cityhub_metrics_section_up", { section })]).toEqual([section, 1]);
    const cache = S.CacheReport.parse((await call(t.app, "GET", "/admin/cache", { token })).body.data);
    const modules = Object.keys(cache.modules);
    expect(modules.length).toBeGreaterThan(0);
    const scraped = new Set((m.get("cityhub_cache_misses_total")?.metrics ?? []).map((s) => s.labels?.module));
    expect([...scraped].sort()).toEqual(modules.sort());
  });
});

describe("the Grafana dashboard (docs/grafana/cityhub.json)", () => {
  test("every metric its queries read is exposed by GET /metrics, with samples after a sale", async () => {
    const dashboard = (await Bun.file(new URL("../../docs/grafana/cityhub.json", import.meta.url)).json()) as {
      panels: { title: string; targets: { expr: string }[] }[];
      templating: unknown;
    };
    const exprs = [
      ...dashboard.panels.flatMap((p) => p.targets.map((x) => x.expr)),
      ...(JSON.stringify(dashboard.templating).match(/label_values\([^)]*\)/g) ?? []),
    ];
    // Metric names in PromQL: our families all start with cityhub_ (a selector, not the exposition).
    const queried = new Set(exprs.flatMap((e) => e.match(/\bcityhub_[a-z0-9_]+/g) ?? []));
    expect(queried.size).toBeGreaterThan(15);
    const sale = await createSeckill(t, { stock: 1 });
    const [user] = await sessionsFor(t, userIds(1));
    expect(
      (await call(t.app, "POST", `/api/voucher-order/seckill/${sale.voucherId}`, { token: user ?? "" })).body.success,
    ).toBe(true);
    // Give each dependency answered calls so the latency families have samples.
    await call(t.app, "GET", "/health", { token });
    const m = await scrape(t);
    const missing = [...queried].filter((name) => (m.get(name)?.metrics.length ?? 0) === 0);
    expect(missing).toEqual([]);
    for (const p of dashboard.panels) expect([p.title, p.targets.length > 0]).toEqual([p.title, true]);
  });
});

/**
 * The figures GET /metrics exposes, read at scrape time from the snapshots /admin already serves
 * (nothing is kept for it): sales (the newest METRICS_SALES of the jobs' registry: attempts by
 * outcome, stock and buyers per shard — the reads of GET /admin/seckill/{id} and the console's
 * sale page), the order outbox and the writer's lag per shop, cache counters per module, and this
 * isolate's guards, load shedding and writer.
 *
 * Two scopes, named in each family's HELP: "all isolates" figures live in Redis/MySQL (the same
 * from any isolate: take max() across scraped instances, never sum()); "this isolate" figures are
 * the answering process's memory (one per instance on Bun/Deno; one isolate of many on Workers).
 * A section whose dependency did not answer is left out and `cityhub_metrics_section_up` is 0 for
 * it, so a scrape still answers during an outage. Cost per scrape: docs/decisions/metrics.md.
 */
import type { Deps } from "../deps.ts";
import { DEPENDENCIES, type BreakerStateName } from "../resilience.ts";
import { family, type Family } from "../util/prometheus.ts";
import { pipelineBacklog, writerStats } from "./ops.ts";
import { OUTCOMES, saleOutcomes } from "./sale-counters.ts";
import { registeredSeckills } from "./seckill/registry.ts";
import { seckillState } from "./seckill/state.ts";
import { ShardUnavailable } from "./seckill/shards.ts";
import { saleState } from "./vouchers.ts";

/** Sales exposed per scrape: the newest of the registry (each costs one MULTI per shard and one HGETALL). */
export const METRICS_SALES = 20;

const BREAKER_STATES: readonly BreakerStateName[] = ["closed", "open", "halfOpen", "isolated"];
const SALE_STATES = ["upcoming", "on sale", "sold out", "ended"] as const;
const CACHE_HITS = [
  ["l1Hits", "l1"],
  ["l2Hits", "l2"],
  ["staleServes", "stale"],
  ["nullHits", "null"],
] as const;

const ms = (v: number) => v / 1000;

export type MetricsSection = "sales" | "outbox" | "cache";

/** Every family of one scrape, in exposition order. */
export async function collectMetrics(deps: Deps): Promise<Family[]> {
  const up = family("cityhub_metrics_section_up", "gauge", "1 when the section's dependency answered this scrape");
  const sections = await Promise.all([
    salesFamilies(deps).then(ok("sales", up), failed("sales", up, deps)),
    outboxFamilies(deps).then(ok("outbox", up), failed("outbox", up, deps)),
    cacheFamilies(deps).then(ok("cache", up), failed("cache", up, deps)),
  ]);
  return [up, ...sections.flat(), ...guardFamilies(deps), ...shedFamilies(deps), ...writerFamilies(deps)];
}

const ok = (section: MetricsSection, up: ReturnType<typeof family>) => (fs: Family[]) => {
  up.add(1, { section });
  return fs;
};
const failed = (section: MetricsSection, up: ReturnType<typeof family>, deps: Deps) => (err: unknown) => {
  deps.log.warn("metrics section unavailable", { section, err });
  up.add(0, { section });
  return [] as Family[];
};

async function salesFamilies(deps: Deps): Promise<Family[]> {
  const now = deps.clock.now();
  const cfgs = (await registeredSeckills(deps, now)).slice(-METRICS_SALES);
  const attempts = family(
    "cityhub_seckill_attempts_total",
    "counter",
    "Seckill attempts by outcome, all isolates (each up to its last flush, the answering one up to now)",
  );
  const initial = family("cityhub_seckill_initial_stock", "gauge", "Units the sale started with");
  const stock = family("cityhub_seckill_stock", "gauge", "Units left in Redis per shard, all isolates");
  const buyers = family("cityhub_seckill_buyers", "gauge", "Buyers holding a unit per shard, all isolates");
  const sold = family(
    "cityhub_seckill_sold",
    "gauge",
    "Units taken out of Redis's stock (initial − stock), all shards",
  );
  const state = family("cityhub_seckill_state", "gauge", "1 for the sale's state now, 0 for the others");
  const window = family(
    "cityhub_seckill_window_seconds",
    "gauge",
    "Sale window bounds, epoch seconds (edge=begin|end)",
  );
  await Promise.all(
    cfgs.map(async (cfg) => {
      const [st, outcomes] = await Promise.all([
        seckillState(deps, cfg).catch((err: unknown) => {
          // A voucher in shards this deployment lacks: its stock is unknown, its attempts are not.
          if (err instanceof ShardUnavailable) return null;
          throw err;
        }),
        saleOutcomes(deps, cfg.voucherId),
      ]);
      const sale = { voucher_id: cfg.voucherId, shop_id: cfg.shopId };
      for (const o of OUTCOMES) attempts.add(outcomes.counts[o], { ...sale, outcome: o });
      initial.add(cfg.initialStock, sale);
      window.add(ms(cfg.beginMs), { ...sale, edge: "begin" });
      window.add(ms(cfg.endMs), { ...sale, edge: "end" });
      if (!st) return;
      for (const s of st.shards) {
        stock.add(s.stock, { ...sale, shard: s.shard });
        buyers.add(s.buyers, { ...sale, shard: s.shard });
      }
      sold.add(cfg.initialStock - st.stock, sale);
      const current = saleState(cfg, st.stock, now);
      for (const s of SALE_STATES) state.add(s === current ? 1 : 0, { ...sale, state: s });
    }),
  );
  return [attempts, initial, stock, buyers, sold, state, window];
}

async function outboxFamilies(deps: Deps): Promise<Family[]> {
  const backlog = await pipelineBacklog(deps);
  const pending = family(
    "cityhub_outbox_pending",
    "gauge",
    "Reservations waiting for MySQL per shop (all its outboxes), all isolates; shops with none are left out",
  );
  const lag = family(
    "cityhub_writer_lag_seconds",
    "gauge",
    "How late the oldest claimable reservation of the shop's outboxes is, seconds",
  );
  for (const shop of backlog.shops) {
    pending.add(shop.pending, { shop_id: shop.shopId });
    lag.add(ms(shop.lagMs), { shop_id: shop.shopId });
  }
  const total = family("cityhub_outbox_pending_all", "gauge", "Reservations waiting for MySQL, every shop");
  total.add(backlog.shops.reduce((a, s) => a + s.pending, 0));
  const maxLag = family("cityhub_writer_lag_max_seconds", "gauge", "The largest writer lag of any shop, seconds");
  maxLag.add(ms(backlog.shops.reduce((a, s) => Math.max(a, s.lagMs), 0)));
  return [pending, lag, total, maxLag];
}

async function cacheFamilies(deps: Deps): Promise<Family[]> {
  const report = await deps.isolate.caches.metrics.report(deps);
  const hits = family(
    "cityhub_cache_hits_total",
    "counter",
    "Cache reads served without the origin, per module and level (l1, l2, stale, null), all isolates",
  );
  const misses = family("cityhub_cache_misses_total", "counter", "Cache reads loaded from the origin, all isolates");
  const errors = family("cityhub_cache_errors_total", "counter", "Cache reads that failed, all isolates");
  for (const [module, c] of Object.entries(report.modules)) {
    for (const [field, level] of CACHE_HITS) hits.add(c[field], { module, level });
    misses.add(c.originLoads, { module });
    errors.add(c.errors, { module });
  }
  const isolates = family("cityhub_cache_isolates", "gauge", "Isolates that reported cache counters");
  isolates.add(report.isolates);
  return [hits, misses, errors, isolates];
}

function guardFamilies(deps: Deps): Family[] {
  const f = {
    state: family("cityhub_breaker_state", "gauge", "1 for the breaker's state now, 0 for the others; this isolate"),
    timeout: family("cityhub_dependency_timeout_seconds", "gauge", "Deadline a call starting now gets; this isolate"),
    p99: family(
      "cityhub_dependency_latency_p99_seconds",
      "gauge",
      "Rolling p99 of recent answer times; absent until enough answers; this isolate",
    ),
    inFlight: family("cityhub_dependency_in_flight", "gauge", "Calls waiting for an answer now; this isolate"),
    calls: family("cityhub_dependency_calls_total", "counter", "Calls started, refused ones included; this isolate"),
    failures: family("cityhub_dependency_failures_total", "counter", "Failed calls; this isolate"),
    timeouts: family("cityhub_dependency_timeouts_total", "counter", "Deadlines missed, excused or not; this isolate"),
    queued: family(
      "cityhub_dependency_queued_timeouts_total",
      "counter",
      "Deadlines missed while the dependency answered other calls (not failures); this isolate",
    ),
    rejected: family(
      "cityhub_dependency_rejected_total",
      "counter",
      "Calls refused by the breaker without calling; this isolate",
    ),
    trips: family("cityhub_breaker_trips_total", "counter", "Times the breaker opened; this isolate"),
  };
  for (const d of DEPENDENCIES) {
    const g = deps.isolate.resilience[d].snapshot();
    const dependency = { dependency: d };
    for (const s of BREAKER_STATES) f.state.add(s === g.state ? 1 : 0, { ...dependency, state: s });
    f.timeout.add(ms(g.timeoutMs), dependency);
    if (g.p99Ms !== null) f.p99.add(ms(g.p99Ms), dependency);
    f.inFlight.add(g.inFlight, dependency);
    f.calls.add(g.calls, dependency);
    f.failures.add(g.failures, dependency);
    f.timeouts.add(g.timeouts, dependency);
    f.queued.add(g.queued, dependency);
    f.rejected.add(g.rejected, dependency);
    f.trips.add(g.opened, dependency);
  }
  return Object.values(f);
}

function shedFamilies(deps: Deps): Family[] {
  const shed = deps.isolate.shed;
  const refused = family(
    "cityhub_shed_requests_total",
    "counter",
    "Requests refused at the door (503) by reason: in_flight, lag; this isolate",
  );
  refused.add(shed.shed.inFlight, { reason: "in_flight" });
  refused.add(shed.shed.lag, { reason: "lag" });
  const inFlight = family("cityhub_requests_in_flight", "gauge", "Requests started and not yet answered; this isolate");
  inFlight.add(shed.inFlight);
  const lag = family("cityhub_event_loop_lag_seconds", "gauge", "Smoothed event-loop lag (0 on workerd); this isolate");
  lag.add(ms(shed.lagMs));
  return [refused, inFlight, lag];
}

function writerFamilies(deps: Deps): Family[] {
  const w = writerStats(deps);
  const f = family(
    "cityhub_writer_events_total",
    "counter",
    "The order writer's work by kind (reservations, flushes, drain_publishes, publish_failures, close_publishes, drained); this isolate",
  );
  f.add(w.reservations, { kind: "reservations" });
  f.add(w.flushes, { kind: "flushes" });
  f.add(w.drainPublishes, { kind: "drain_publishes" });
  f.add(w.publishFailures, { kind: "publish_failures" });
  f.add(w.closePublishes, { kind: "close_publishes" });
  f.add(w.drained, { kind: "drained" });
  return [f];
}

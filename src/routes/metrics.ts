/**
 * GET /metrics: the operator's figures in the Prometheus text format (services/metrics.ts), behind
 * the operator Bearer as /admin is (Prometheus sends it with `authorization: { credentials }`).
 * Sections whose dependency is down are left out and flagged, so a scrape answers during an
 * outage; the answer is never cached.
 */
import { Hono } from "hono";
import { requireOperator } from "../http/auth.ts";
import { doc } from "../openapi/describe.ts";
import { collectMetrics, METRICS_SALES } from "../services/metrics.ts";
import type { AppEnv } from "../types.ts";
import { PROMETHEUS_CONTENT_TYPE, render } from "../util/prometheus.ts";

export const metrics = new Hono<AppEnv>().use(requireOperator).get(
  "/",
  doc(
    {
      tag: "operator",
      access: "operator",
      summary:
        "Prometheus scrape: sales by outcome, stock per shard, outbox and writer lag, cache hits and misses, breakers, dependency latency, shed requests",
      description: `Prometheus text format 0.0.4. Figures kept in Redis/MySQL (sales, outbox, cache) are the same from any instance — aggregate them with max(), not sum(); breakers, shedding and the writer are the answering isolate's. Sales: the ${METRICS_SALES} newest of the jobs' registry. A section whose dependency did not answer is left out and \`cityhub_metrics_section_up{section}\` is 0. docs/decisions/metrics.md; a Grafana dashboard reading it: docs/grafana/cityhub.json.`,
      okContent: { [PROMETHEUS_CONTENT_TYPE]: { schema: { type: "string" } } },
    },
    async (c) => {
      const body = render(await collectMetrics(c.get("deps")));
      return c.body(body, 200, { "content-type": PROMETHEUS_CONTENT_TYPE, "cache-control": "no-store" });
    },
  ),
);

import { Hono } from "hono";
import type { AppEnv } from "../types.ts";
import { isOperator } from "../http/auth.ts";
import { checkHealth, publicHealth } from "../services/health.ts";
import { doc } from "../openapi/describe.ts";

const REPORT = {
  "application/json": {
    schema: {
      type: "object",
      properties: {
        success: { type: "boolean" },
        data: {
          type: "object",
          description:
            "Anyone: `ok`, and `redis` / `mysql` each `up`, `degraded` (answering while this isolate's breaker is not closed) or `down` — nothing more. With the operator's Bearer token: `ok`, then `redis` and `mysql` each with `ok`, `latencyMs` and a scrubbed `error` when down, and `breakers`: this isolate's circuit breaker per dependency (`state` closed/open/halfOpen/isolated, `failures`, `lastOpenedAt`, …)",
        },
      },
    },
  },
};
const HEALTH = {
  tag: "service",
  summary: "Liveness: Redis and MySQL probed separately (detail for operators)",
  access: "public",
  responses: {
    200: { description: "Both up", content: REPORT },
    503: { description: "Redis or MySQL down (named in `data`)", content: REPORT },
  },
} as const;

/** How long an isolate answers anonymous /health from its last probe, ms (a probe costs one PING and one query). */
export const PUBLIC_HEALTH_MEMO_MS = 1_000;

export const health = new Hono<AppEnv>().get(
  "/",
  doc(HEALTH, async (c) => {
    const deps = c.get("deps");
    // Dependency errors and breaker internals are for operators only (issue 16: they leaked tokens);
    // operators always get a fresh probe.
    if (isOperator(c.req.header("authorization"), deps.config.ADMIN_TOKEN)) {
      const report = await checkHealth(deps);
      return c.json({ success: report.ok, data: report }, report.ok ? 200 : 503);
    }
    // Anyone else: at most one probe per isolate per PUBLIC_HEALTH_MEMO_MS, so hammering /health
    // costs the caller requests, not us Redis commands and queries (issue 16 item 5).
    const memo = deps.isolate.publicHealth;
    const now = deps.clock.now();
    if (!memo.report || now - memo.at >= PUBLIC_HEALTH_MEMO_MS) {
      memo.report = publicHealth(await checkHealth(deps));
      memo.at = now;
    }
    return c.json({ success: memo.report.ok, data: memo.report }, memo.report.ok ? 200 : 503);
  }),
);

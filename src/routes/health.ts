import { Hono } from "hono";
import type { AppEnv } from "../types.ts";
import { isOperator } from "../http/auth.ts";
import { checkHealth, memoPublicHealth } from "../services/health.ts";
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
            "Anyone: `ok`, and `redis` / `mysql` each `up`, `degraded` (answering while this isolate's breaker is not closed), `down`, or `unknown` (this isolate's first probe is still running; 503 with Retry-After 1) — nothing more; answered from this isolate's last probe for up to a second, and concurrent callers share one probe. With the operator's Bearer token: `ok`, then `redis` and `mysql` each with `ok`, `latencyMs` and a scrubbed `error` when down, and `breakers`: this isolate's circuit breaker per dependency (`state` closed/open/halfOpen/isolated, `failures`, `lastOpenedAt`, …)",
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
    503: { description: "Redis or MySQL down (named in `data`), or not yet probed (`unknown`)", content: REPORT },
  },
} as const;

export const health = new Hono<AppEnv>().get(
  "/",
  doc(HEALTH, async (c) => {
    const deps = c.get("deps");
    // Dependency errors and breaker internals are for operators only (they once leaked tokens);
    // operators always get a fresh probe.
    if (isOperator(c.req.header("authorization"), deps.config.ADMIN_TOKEN)) {
      const report = await checkHealth(deps);
      return c.json({ success: report.ok, data: report }, report.ok ? 200 : 503);
    }
    // Anyone else: the isolate's memo, at most one probe in flight (services/health.ts memoPublicHealth).
    const report = await memoPublicHealth(deps);
    if (report.redis === "unknown") c.header("Retry-After", "1");
    return c.json({ success: report.ok, data: report }, report.ok ? 200 : 503);
  }),
);

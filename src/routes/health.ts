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
const HEALTH = { tag: "service", summary: "Liveness: Redis and MySQL probed separately (detail for operators)", access: "public", responses: { 200: { description: "Both up", content: REPORT }, 503: { description: "Redis or MySQL down (named in `data`)", content: REPORT } } } as const;

export const health = new Hono<AppEnv>().get("/", doc(HEALTH, async (c) => {
  const deps = c.get("deps");
  const report = await checkHealth(deps);
  // Dependency errors and breaker internals are for operators only (issue 16: they leaked tokens).
  const data = isOperator(c.req.header("authorization"), deps.config.ADMIN_TOKEN) ? report : publicHealth(report);
  return c.json({ success: report.ok, data }, report.ok ? 200 : 503);
}));

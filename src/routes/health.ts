import { Hono } from "hono";
import type { AppEnv } from "../types.ts";
import { checkHealth } from "../services/health.ts";
import { doc } from "../openapi/describe.ts";

const REPORT = { "application/json": { schema: { type: "object", properties: { success: { type: "boolean" }, data: { type: "object", description: "`ok`, then `redis` and `mysql`, each with `ok`, `latencyMs` and `error` when down, and `breakers`: this isolate's circuit breaker per dependency (`state` closed/open/halfOpen/isolated, `failures`, `lastOpenedAt`, …)" } } } } };
const HEALTH = { tag: "service", summary: "Liveness: Redis and MySQL probed separately", access: "public", responses: { 200: { description: "Both up", content: REPORT }, 503: { description: "Redis or MySQL down (named in `data`)", content: REPORT } } } as const;

export const health = new Hono<AppEnv>().get("/", doc(HEALTH, async (c) => {
  const report = await checkHealth(c.get("deps"));
  return c.json({ success: report.ok, data: report }, report.ok ? 200 : 503);
}));

import { Hono } from "hono";
import type { AppEnv } from "../types.ts";
import { checkHealth } from "../services/health.ts";

export const health = new Hono<AppEnv>().get("/", async (c) => {
  const report = await checkHealth(c.get("deps"));
  return c.json({ success: report.ok, data: report }, report.ok ? 200 : 503);
});

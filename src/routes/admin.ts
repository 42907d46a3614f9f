import { Hono } from "hono";
import { cachesFor } from "../cache/modules.ts";
import { ok } from "../errors.ts";
import { requireOperator } from "../http/auth.ts";
import type { AppEnv } from "../types.ts";

export const admin = new Hono<AppEnv>().use(requireOperator).get("/cache", async (c) => {
  const deps = c.get("deps");
  return c.json(ok(await cachesFor(deps).metrics.report(deps)));
});

import { Hono } from "hono";
import { cachesFor } from "../cache/modules.ts";
import { fail, ok } from "../errors.ts";
import { reconcile, type ReconcileReport } from "../services/seckill/reconcile.ts";
import { keys } from "../redis/keys.ts";
import { withLock } from "../redis/lock.ts";
import { requireOperator } from "../http/auth.ts";
import type { AppEnv } from "../types.ts";

export const admin = new Hono<AppEnv>()
  .use(requireOperator)
  .get("/cache", async (c) => {
    const deps = c.get("deps");
    return c.json(ok(await cachesFor(deps).metrics.report(deps)));
  })
  .get("/reconcile", async (c) => {
    const deps = c.get("deps");
    const report = await deps.redis.get<ReconcileReport>(keys.seckill.reconcileReport());
    return c.json(ok(report ?? { at: null, vouchers: [] }));
  })
  .post("/reconcile", async (c) => {
    const deps = c.get("deps");
    const res = await withLock(deps.redis, "cron:reconcile", 55_000, () => reconcile(deps, deps.clock.now()));
    return c.json(res.ran ? ok(res.value) : fail("CONFLICT", "a reconcile run is in progress"), res.ran ? 200 : 409);
  });

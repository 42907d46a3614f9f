import { Hono } from "hono";
import { z } from "zod";
import { cachesFor } from "../cache/modules.ts";
import { fail, ok } from "../errors.ts";
import { reconcile, type ReconcileReport } from "../services/seckill/reconcile.ts";
import { keys } from "../redis/keys.ts";
import { withLock } from "../redis/lock.ts";
import { requireOperator } from "../http/auth.ts";
import type { AppEnv } from "../types.ts";
import { v } from "../http/validate.ts";
import { listRefunds } from "../services/seckill/payments.ts";
import { formatInZone } from "../util/time.ts";

const RefundsQuery = z.object({
  state: z.enum(["requested", "failed", "succeeded", "open"]).optional(),
  orderId: z.string().regex(/^[1-9]\d{0,18}$/, "not an order id").refine((s) => /^\d+$/.test(s) && BigInt(s) <= 9_223_372_036_854_775_807n, "not an order id").optional(),
  limit: z.coerce.number().int().min(1).max(200).default(50),
});

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
  })
  .get("/refunds", v("query", RefundsQuery), async (c) => {
    const deps = c.get("deps");
    const zone = deps.config.SERVICE_TIME_ZONE;
    const refunds = await listRefunds(deps, c.req.valid("query"));
    return c.json(
      ok(
        refunds.map((r) => ({
          ...r,
          nextAttemptAt: r.nextAttemptAt === null ? null : formatInZone(r.nextAttemptAt, zone),
          createTime: formatInZone(r.createTime, zone),
          updateTime: formatInZone(r.updateTime, zone),
        })),
      ),
    );
  });

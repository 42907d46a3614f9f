import { Hono } from "hono";
import { z } from "zod";
import { fail, ok } from "../errors.ts";
import type { ReconcileReport } from "../services/seckill/reconcile.ts";
import { registeredSeckills, shopsOf } from "../services/seckill/registry.ts";
import { keys } from "../redis/keys.ts";
import { runJobNow } from "../jobs/index.ts";
import { requireOperator } from "../http/auth.ts";
import { BODY_LIMITS, jsonBody } from "../http/body.ts";
import { idempotentOperator } from "../http/idempotency.ts";
import type { AppEnv } from "../types.ts";
import { queryInt } from "../http/validate.ts";
import { doc, v } from "../openapi/describe.ts";
import { listRefunds } from "../services/seckill/payments.ts";
import { OrderId } from "../util/ids.ts";
import { formatInZone } from "../util/time.ts";
import { resilienceSnapshot } from "../resilience.ts";

const RefundsQuery = z.object({
  state: z.enum(["requested", "failed", "succeeded", "open"]).optional(),
  orderId: OrderId.optional(),
  limit: queryInt(1, 200).default(50),
});

export const admin = new Hono<AppEnv>()
  .use(requireOperator)
  .post("/console/revoke-sessions", jsonBody(BODY_LIMITS.none), doc({ tag: "operator", summary: "Sign out every console session now (sessions issued before this instant are void in every isolate)", access: "operator" }, async (c) => {
    const deps = c.get("deps");
    await deps.redis.set(keys.consoleEpoch(), String(deps.clock.now()));
    return c.json(ok());
  }))
  .get("/resilience", doc({ tag: "operator", summary: "This isolate's circuit breakers per dependency: state, timeout, calls, failures, timeouts, rejected, openings, last failure", access: "operator", data: { type: "object" } }, (c) => {
    // Memory only (no dependency is called): it answers while everything is down.
    return c.json(ok(resilienceSnapshot(c.get("deps").isolate.resilience)));
  }))
  .get("/cache", doc({ tag: "operator", summary: "Cache counters per module, summed across isolates", access: "operator", data: { type: "object" } }, async (c) => {
    const deps = c.get("deps");
    return c.json(ok(await deps.isolate.caches.metrics.report(deps)));
  }))
  .get("/cache/hot", doc({ tag: "operator", summary: "Hot keys: the most-read promoted keys across isolates (this and the previous minute), and those promoted in this isolate", access: "operator", data: { type: "object" } }, async (c) => {
    const deps = c.get("deps");
    const report = await deps.isolate.caches.metrics.hotReport(deps);
    return c.json(ok(report ?? { rule: null, minutes: [], top: [], promotedHere: [] }));
  }))
  .get("/orders/pipeline", doc({ tag: "operator", summary: "The order queue: reservations waiting for MySQL and the lag per shop, and this isolate's writer counters", access: "operator", data: { type: "object" } }, async (c) => {
    // The order queue as an operator sees it: per shop with seckill vouchers in the registry, the
    // reservations waiting for MySQL and how far behind the oldest claimable one is; plus what
    // this isolate's pipeline has done (counters are per isolate, like its memory).
    const deps = c.get("deps");
    const now = deps.clock.now();
    const shops = shopsOf(await registeredSeckills(deps, now));
    const p = deps.redis.pipeline();
    for (const shopId of shops) {
      p.hlen(keys.seckill.outbox(shopId));
      p.zrange(keys.seckill.outboxDue(shopId), 0, 0, { withScores: true });
    }
    const raw = shops.length > 0 ? ((await p.exec()) as unknown[]) : [];
    const backlog = shops.map((shopId, i) => {
      const pending = Number(raw[2 * i] ?? 0);
      const oldest = raw[2 * i + 1] as (string | number)[] | undefined;
      const dueMs = oldest && oldest.length >= 2 ? Number(oldest[1]) : null;
      return { shopId, pending, lagMs: dueMs === null ? 0 : Math.max(0, now - dueMs) };
    });
    return c.json(ok({ at: now, shops: backlog.filter((b) => b.pending > 0), isolate: { ...deps.orderGroups.stats, lockConflicts: deps.orderGroups.lockConflicts } }));
  }))
  .get("/reconcile", doc({ tag: "operator", summary: "The last Redis ↔ MySQL reconcile report", access: "operator", data: { type: "object" } }, async (c) => {
    const deps = c.get("deps");
    const report = await deps.redis.get<ReconcileReport>(keys.seckill.reconcileReport());
    return c.json(ok(report ?? { at: null, vouchers: [] }));
  }))
  .post("/reconcile", jsonBody(BODY_LIMITS.none), idempotentOperator(BODY_LIMITS.none), doc({ tag: "operator", summary: "Run a reconcile now (409 while another run holds the lock)", access: "operator", data: { type: "object" }, errors: ["CONFLICT"] }, async (c) => {
    const deps = c.get("deps");
    const res = await runJobNow(deps, "reconcile");
    return c.json(res.ran ? ok(res.value) : fail("CONFLICT", "a reconcile run is in progress"), res.ran ? 200 : 409);
  }))
  .get("/refunds", doc({ tag: "operator", summary: "Refunds, newest first, with state, attempts, last error and next attempt", access: "operator", data: { type: "array", items: { type: "object" } } }, v("query", RefundsQuery)), async (c) => {
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

import { Hono } from "hono";
import { z } from "zod";
import { fail, ok } from "../errors.ts";
import { runJobNow } from "../jobs/index.ts";
import { requireOperator } from "../http/auth.ts";
import { BODY_LIMITS, jsonBody } from "../http/body.ts";
import { idempotentOperator } from "../http/idempotency.ts";
import { Id, queryInt } from "../http/validate.ts";
import { doc, type RouteDoc, v } from "../openapi/describe.ts";
import {
  type Assert,
  Breakers,
  BulkOutcome,
  CacheReport,
  DeadLetterPage,
  type Describes,
  HotReportOrOff,
  OpsSnapshot,
  OrderView,
  PipelineBacklog,
  ReconcileReport,
  ReconcileReportOrNone,
  Redriven,
  RefundOut,
  SaleRow,
  SeckillView,
  VoucherRow,
} from "../openapi/operator.ts";
import { resilienceSnapshot } from "../resilience.ts";
import { revokeAllConsoleSessions } from "../services/console-sessions.ts";
import {
  deleteAll,
  deleteDeadLetter,
  DLQ_PAGE_MAX,
  DlqId,
  listDeadLetters,
  redriveAll,
  redriveDeadLetter,
} from "../services/dlq.ts";
import {
  lastReconcileReport,
  opsSnapshot,
  orderById,
  ordersOfUser,
  pipelineBacklog,
  salesOverview,
  seckillView,
} from "../services/ops.ts";
import { listRefunds, type RefundView } from "../services/seckill/payments.ts";
import { latestVouchers } from "../services/vouchers.ts";
import type { AppEnv } from "../types.ts";
import { OrderId } from "../util/ids.ts";
import { formatInZone } from "../util/time.ts";

const RefundsQuery = z.object({
  state: z.enum(["requested", "failed", "succeeded", "open"]).optional(),
  orderId: OrderId.optional(),
  limit: queryInt(1, 200).default(50),
});
const OrdersQuery = z
  .object({
    id: OrderId.optional().describe("an order id (queued ones too)"),
    userId: Id.optional().describe("a user id: their newest 20 orders in MySQL"),
  })
  .refine((q) => (q.id === undefined) !== (q.userId === undefined), { message: "give exactly one of id and userId" });

const DlqParam = z.object({ id: DlqId });
const VoucherParam = z.object({ voucherId: Id });
const DestinationUrl = z
  .url({ protocol: /^https?$/, error: "must be an http(s) URL" })
  .max(2048)
  .describe("exact destination URL of the messages");
const DlqListQuery = z.object({
  cursor: z.string().max(200).optional().describe("from the previous page's `cursor`"),
  count: queryInt(1, DLQ_PAGE_MAX).default(50),
  url: DestinationUrl.optional(),
});
const DlqFilterQuery = z.object({ url: DestinationUrl.optional() });
const DlqDeleteQuery = z
  .object({
    url: DestinationUrl.optional(),
    all: z.enum(["true"]).optional().describe("`true`: delete every entry (required without `url`)"),
  })
  .refine((q) => q.url !== undefined || q.all === "true", {
    message: "pass all=true to delete every dead letter, or url=… to delete those of one destination",
  });

/** GET /admin/refunds answers times in the service zone (as it always has). */
function presentRefund(r: RefundView, zone: string) {
  return {
    ...r,
    nextAttemptAt: r.nextAttemptAt === null ? null : formatInZone(r.nextAttemptAt, zone),
    createTime: formatInZone(r.createTime, zone),
    updateTime: formatInZone(r.updateTime, zone),
  };
}
type _refund = Assert<Describes<typeof RefundOut, ReturnType<typeof presentRefund>>>;

const operator = (summary: string, extra: Partial<RouteDoc> = {}): RouteDoc => ({
  tag: "operator",
  summary,
  access: "operator",
  ...extra,
});

/** Mounted at /admin: the operator snapshots of services/ops.ts and services/dlq.ts as JSON (the console renders the same ones as HTML). */
export const admin = new Hono<AppEnv>()
  .use(requireOperator)
  .post(
    "/console/revoke-sessions",
    jsonBody(BODY_LIMITS.none),
    doc(
      operator("Sign out every console session now (sessions issued before this instant are void in every isolate)"),
      async (c) => {
        await revokeAllConsoleSessions(c.get("deps"));
        return c.json(ok());
      },
    ),
  )
  .get(
    "/resilience",
    doc(
      operator(
        "This isolate's circuit breakers per dependency: state, timeout, calls, failures, timeouts, rejected, openings, last failure",
        { data: Breakers },
      ),
      (c) =>
        // Memory only (no dependency is called): it answers while everything is down.
        c.json(ok(resilienceSnapshot(c.get("deps").isolate.resilience))),
    ),
  )
  .get(
    "/cache",
    doc(operator("Cache counters per module, summed across isolates", { data: CacheReport }), async (c) => {
      const deps = c.get("deps");
      return c.json(ok(await deps.isolate.caches.metrics.report(deps)));
    }),
  )
  .get(
    "/cache/hot",
    doc(
      operator(
        "Hot keys: the most-read promoted keys across isolates (this and the previous minute), and those promoted in this isolate",
        { data: HotReportOrOff },
      ),
      async (c) => {
        const deps = c.get("deps");
        const report = await deps.isolate.caches.metrics.hotReport(deps);
        return c.json(ok(report ?? { rule: null, minutes: [], top: [], promotedHere: [] }));
      },
    ),
  )
  .get(
    "/sales",
    doc(
      operator(
        "Seckill sales of the jobs' registry (not ended more than 7 days ago), newest first, with their Redis stock and state (the console's sales page)",
        { data: z.array(SaleRow) },
      ),
      async (c) => c.json(ok(await salesOverview(c.get("deps")))),
    ),
  )
  .get(
    "/seckill/:voucherId",
    doc(
      operator(
        "One seckill sale now: its window and stock, its stock and buyers per shard, sold, MySQL's side, and its reservations waiting in each shard's outbox",
        {
          description:
            "`shards` has one entry per seckill shard database the voucher lives in (one, shard 0, when it is in the main database: `shardCount` 0). Each shard is read atomically; the shards at about the same moment, so a move of stock between shards in flight shows in `unaccounted` for one round trip. A voucher living in shards this deployment does not have (SECKILL_SHARD_URLS) is a 503.",
          data: SeckillView,
          outcomes: ["NOT_FOUND"],
          errors: ["UNAVAILABLE"],
        },
      ),
      v("param", VoucherParam),
    ),
    async (c) => {
      const res = await seckillView(c.get("deps"), c.req.valid("param").voucherId);
      if (res.ok) return c.json(ok(res.view));
      if (res.reason === "NOT_FOUND") return c.json(fail("NOT_FOUND", "no such seckill voucher"));
      c.header("Retry-After", "60");
      return c.json(fail("UNAVAILABLE", res.message, c.get("requestId")), 503);
    },
  )
  .get(
    "/vouchers",
    doc(
      operator(
        "The 50 newest vouchers of any shop, seckill ones with their MySQL stock, window and state (the console's voucher list)",
        { data: z.array(VoucherRow) },
      ),
      async (c) => c.json(ok(await latestVouchers(c.get("deps")))),
    ),
  )
  .get(
    "/ops",
    doc(
      operator(
        "The operations snapshot (the console's operations page): this isolate's breakers and limiters, the reconcile report, cache and hot keys, visitors, refunds, the writer",
        {
          description:
            "Every Redis- or MySQL-backed section falls back on its own: it is then empty and named in `unavailable` with the (scrubbed) error, so the snapshot answers while a dependency is down.",
          data: OpsSnapshot,
        },
      ),
      async (c) => c.json(ok(await opsSnapshot(c.get("deps")))),
    ),
  )
  .get(
    "/orders",
    doc(
      operator("Order lookup: one order by id (queued ones, still in the outbox, too) or a user's newest 20", {
        data: z.array(OrderView),
      }),
      v("query", OrdersQuery),
    ),
    async (c) => {
      const deps = c.get("deps");
      const q = c.req.valid("query");
      if (q.id !== undefined) {
        const order = await orderById(deps, q.id);
        return c.json(ok(order ? [order] : []));
      }
      return c.json(ok(await ordersOfUser(deps, q.userId ?? 0)));
    },
  )
  .get(
    "/orders/pipeline",
    doc(
      operator(
        "The order queue: reservations waiting for MySQL and the lag per shop, and this isolate's writer counters",
        { data: PipelineBacklog },
      ),
      async (c) => c.json(ok(await pipelineBacklog(c.get("deps")))),
    ),
  )
  .get(
    "/reconcile",
    doc(operator("The last Redis ↔ MySQL reconcile report", { data: ReconcileReportOrNone }), async (c) =>
      c.json(ok((await lastReconcileReport(c.get("deps"))) ?? { at: null, vouchers: [] })),
    ),
  )
  .post(
    "/reconcile",
    jsonBody(BODY_LIMITS.none),
    idempotentOperator(BODY_LIMITS.none),
    doc(
      operator("Run a reconcile now (409 while another run holds the lock)", {
        data: ReconcileReport,
        errors: ["CONFLICT"],
      }),
      async (c) => {
        const res = await runJobNow(c.get("deps"), "reconcile");
        return c.json(
          res.ran ? ok(res.value) : fail("CONFLICT", "a reconcile run is in progress"),
          res.ran ? 200 : 409,
        );
      },
    ),
  )
  .get(
    "/refunds",
    doc(
      operator("Refunds, newest first, with state, attempts, last error and next attempt", {
        data: z.array(RefundOut),
      }),
      v("query", RefundsQuery),
    ),
    async (c) => {
      const deps = c.get("deps");
      const refunds = await listRefunds(deps, c.req.valid("query"));
      return c.json(ok(refunds.map((r) => presentRefund(r, deps.config.SERVICE_TIME_ZONE))));
    },
  )
  .get(
    "/dlq",
    doc(
      operator(
        "Dead-lettered QStash messages, newest first: the failed callback's status and an excerpt of its answer, the message body's start (both scrubbed of secrets)",
        {
          description:
            "Paged: pass the answer's `cursor` for the next page (null on the last). `url` keeps the messages of one destination.",
          data: DeadLetterPage,
          errors: ["UNAVAILABLE"],
        },
      ),
      v("query", DlqListQuery),
    ),
    async (c) => c.json(ok(await listDeadLetters(c.get("deps"), c.req.valid("query")))),
  )
  .post(
    "/dlq/retry-all",
    jsonBody(BODY_LIMITS.none),
    doc(
      operator(
        "Re-drive every dead letter (or those of one destination, `url`): QStash publishes a fresh copy of each, due now, and drops the entries",
        {
          description:
            "Works through at most 1,000 entries per call; `more: true` means some are left: call again. Our callbacks are idempotent, so a message that had in fact been handled changes nothing.",
          data: BulkOutcome,
          errors: ["UNAVAILABLE"],
        },
      ),
      v("query", DlqFilterQuery),
    ),
    idempotentOperator(BODY_LIMITS.none),
    async (c) => c.json(ok(await redriveAll(c.get("deps"), c.req.valid("query")))),
  )
  .post(
    "/dlq/:id/retry",
    jsonBody(BODY_LIMITS.none),
    doc(
      operator(
        "Re-drive one dead letter: QStash publishes a fresh copy, due now (a new message id), and drops the entry",
        { data: Redriven, outcomes: ["NOT_FOUND"], errors: ["UNAVAILABLE"] },
      ),
      v("param", DlqParam),
    ),
    idempotentOperator(BODY_LIMITS.none),
    async (c) => {
      const res = await redriveDeadLetter(c.get("deps"), c.req.valid("param").id);
      return c.json(res.ok ? ok({ messageId: res.messageId }) : fail("NOT_FOUND", "no such dead letter"));
    },
  )
  .delete(
    "/dlq/:id",
    jsonBody(BODY_LIMITS.none),
    doc(operator("Delete one dead letter", { outcomes: ["NOT_FOUND"], errors: ["UNAVAILABLE"] }), v("param", DlqParam)),
    async (c) => {
      const res = await deleteDeadLetter(c.get("deps"), c.req.valid("param").id);
      return c.json(res.ok ? ok() : fail("NOT_FOUND", "no such dead letter"));
    },
  )
  .delete(
    "/dlq",
    jsonBody(BODY_LIMITS.none),
    doc(
      operator("Delete every dead letter (`all=true`) or those of one destination (`url`)", {
        description:
          "Without `all=true` or `url` nothing is deleted (400): a bulk delete is never implied. Works through at most 1,000 entries per call; `more: true` means some are left.",
        data: BulkOutcome,
        errors: ["UNAVAILABLE"],
      }),
      v("query", DlqDeleteQuery),
    ),
    async (c) => {
      const q = c.req.valid("query");
      return c.json(ok(await deleteAll(c.get("deps"), q.url ? { url: q.url } : {})));
    },
  );

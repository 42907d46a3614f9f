import { Hono } from "hono";
import { z } from "zod";
import { AppError, fail, ok } from "../errors.ts";
import { requireUser, type UserEnv } from "../http/auth.ts";
import { limitAddress } from "../http/client-ip.ts";
import { BODY_LIMITS, jsonBody } from "../http/body.ts";
import { seckillEnvelope } from "../http/envelopes.ts";
import { idempotentUser } from "../http/idempotency.ts";
import { Current, Id } from "../http/validate.ts";
import { doc, type RouteDoc, v } from "../openapi/describe.ts";
import { Order, OrderIdText } from "../openapi/schemas.ts";
import { findReservation, getOrderRow, listOrdersOfUser, type OrderRow } from "../services/seckill/orders.ts";
import { startPayment } from "../services/seckill/payments.ts";
import { reserve } from "../services/seckill/reserve.ts";
import { statusName } from "../services/seckill/types.ts";
import { OrderId } from "../util/ids.ts";
import { formatInZone } from "../util/time.ts";

const ORDER_PAGE_SIZE = 10;

function present(o: OrderRow, zone: string) {
  return {
    id: o.id,
    userId: o.userId,
    voucherId: o.voucherId,
    status: statusName(o.status),
    createTime: formatInZone(o.createTime, zone),
    payTime: o.payTime === null ? null : formatInZone(o.payTime, zone),
  };
}

const SECKILL: RouteDoc = {
  tag: "orders",
  summary: "Seckill: reserve one unit of a flash-sale voucher; `data` is the order id",
  description:
    "The order is written to MySQL behind a queue (`GET /api/voucher-order/{id}` reports `queued` until then). `DUPLICATE_ORDER` carries the order the buyer already holds in `data`. Attempts are limited per user and per client address, and per voucher per second across the deployment (SECKILL_ADMISSION_*): 429 with Retry-After, answered without Redis once known. Without Redis (timed out, failing, or its breaker open) it fails closed: 503 UNAVAILABLE with Retry-After, nothing reserved. A reservation whose reply was lost is settled in the same request (reserved → the order id; otherwise fenced, so a late execution cannot reserve); only if that check is lost too: 503 OUTCOME_UNKNOWN with Retry-After — retry to learn your order.",
  access: "user",
  data: OrderIdText,
  outcomes: ["SOLD_OUT", "DUPLICATE_ORDER", "NOT_STARTED", "ENDED", "NOT_FOUND", "LIMIT_REACHED"],
  errors: ["RATE_LIMITED", "UNAVAILABLE", "OUTCOME_UNKNOWN"],
};

export const voucherOrder = new Hono<UserEnv>()
  .use(requireUser)
  // No Idempotency-Key here (http/idempotency.ts): a seckill attempt is already idempotent per
  // buyer — a retry is told the order it holds (DUPLICATE_ORDER with its id) — and its budget is
  // exactly one Redis command, which a claim and a finish would triple.
  .post(
    "/seckill/:voucherId",
    jsonBody(BODY_LIMITS.none),
    doc(SECKILL, v("param", z.object({ voucherId: Id }))),
    async (c) => {
      const deps = c.get("deps");
      const voucherId = c.req.valid("param").voucherId;
      const res = await reserve(deps, { voucherId, userId: c.get("user").id, ip: limitAddress(c, deps.config) });
      deps.isolate.saleCounters.count(voucherId, res.ok ? "ok" : res.reason);
      if (res.ok || (res.reason !== "RATE_LIMITED" && res.reason !== "OUTCOME_UNKNOWN"))
        return c.json(seckillEnvelope(res));
      throw new AppError(res.reason, res.message, { retryAfterSeconds: res.retryAfterMs / 1000 });
    },
  )
  .get(
    "/of/me",
    doc(
      { tag: "orders", summary: "The caller's orders, newest first, 10 a page", access: "user", data: z.array(Order) },
      v("query", z.object({ current: Current })),
    ),
    async (c) => {
      const deps = c.get("deps");
      const rows = await listOrdersOfUser(deps, c.get("user").id, c.req.valid("query").current, ORDER_PAGE_SIZE);
      return c.json(ok(rows.map((o) => present(o, deps.config.SERVICE_TIME_ZONE))));
    },
  )
  .get(
    "/:id",
    doc(
      {
        tag: "orders",
        summary: "One of the caller's orders, with its status (`queued` while not yet in MySQL)",
        access: "user",
        data: Order,
        outcomes: ["NOT_FOUND"],
      },
      v("param", z.object({ id: OrderId })),
    ),
    async (c) => {
      const deps = c.get("deps");
      const id = c.req.valid("param").id;
      const me = c.get("user").id;
      const row = await getOrderRow(deps, id);
      if (row)
        return c.json(
          row.userId === me ? ok(present(row, deps.config.SERVICE_TIME_ZONE)) : fail("NOT_FOUND", "order not found"),
        );
      // Reserved but not yet written to MySQL: the outbox knows it.
      const r = await findReservation(deps, id);
      if (!r || r.userId !== me) return c.json(fail("NOT_FOUND", "order not found"));
      return c.json(
        ok({
          id,
          userId: r.userId,
          voucherId: r.voucherId,
          status: "queued",
          createTime: formatInZone(r.reservedAt, deps.config.SERVICE_TIME_ZONE),
          payTime: null,
        }),
      );
    },
  )
  .post(
    "/:id/pay",
    jsonBody(BODY_LIMITS.none),
    doc(
      {
        tag: "orders",
        summary: "Start paying an unpaid order; the provider's signed webhook settles it",
        access: "user",
        data: z.object({ paymentId: z.string() }),
        outcomes: ["NOT_FOUND", "BAD_STATE"],
      },
      v("param", z.object({ id: OrderId })),
    ),
    idempotentUser(BODY_LIMITS.none),
    async (c) => {
      const res = await startPayment(c.get("deps"), c.get("user").id, c.req.valid("param").id);
      return c.json(res.ok ? ok({ paymentId: res.paymentId }) : fail(res.reason, res.message));
    },
  );

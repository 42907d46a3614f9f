import { Hono } from "hono";
import { z } from "zod";
import { AppError, ok } from "../errors.ts";
import { verifyQstash, type SignedEnv } from "../http/qstash.ts";
import { verifyWebhook } from "../payments/signature.ts";
import { closeOrder, writeOrder } from "../services/seckill/orders.ts";
import { settleWebhook } from "../services/seckill/payments.ts";
import type { AppEnv } from "../types.ts";

const OrderIdText = z.string().regex(/^[1-9]\d{0,18}$/);
const ReservationBody = z.object({
  orderId: OrderIdText,
  userId: z.number().int().positive(),
  voucherId: z.number().int().positive(),
  shopId: z.number().int().positive(),
  reservedAt: z.number().int().positive(),
  amount: z.number().int().min(0),
});
const CloseBody = z.object({ orderId: OrderIdText }).and(ReservationBody.partial());
const WebhookBody = z.discriminatedUnion("type", [
  z.object({ type: z.enum(["payment.succeeded", "payment.failed"]), paymentId: OrderIdText, providerRef: z.string().max(128) }),
  z.object({ type: z.enum(["refund.succeeded", "refund.failed"]), refundId: OrderIdText, providerRef: z.string().max(128) }),
]);

/** Parses a verified raw body; malformed → 400, which QStash dead-letters after its retries. */
function parse<T extends z.ZodType>(schema: T, raw: string): z.infer<T> {
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw new AppError("INVALID_INPUT", "malformed JSON body");
  }
  const res = schema.safeParse(json);
  if (!res.success) throw new AppError("INVALID_INPUT", res.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "));
  return res.data;
}

const signed = new Hono<SignedEnv>()
  .use(verifyQstash)
  .post("/orders/write", async (c) => {
    const outcome = await writeOrder(c.get("deps"), parse(ReservationBody, c.get("rawBody")));
    return c.json(ok({ outcome }));
  })
  .post("/orders/close", async (c) => {
    const body = parse(CloseBody, c.get("rawBody"));
    const full = ReservationBody.safeParse(body);
    const outcome = await closeOrder(c.get("deps"), body.orderId, full.success ? full.data : undefined);
    return c.json(ok({ outcome }));
  });

export const internal = new Hono<AppEnv>()
  .post("/payments/webhook", async (c) => {
    const deps = c.get("deps");
    const raw = await c.req.text();
    const check = await verifyWebhook(deps.config.PAYMENT_WEBHOOK_SECRET, c.req.header("x-payment-signature"), raw, deps.clock.now(), deps.config.PAYMENT_WEBHOOK_TOLERANCE_SECONDS);
    if (!check.ok) throw new AppError("UNAUTHORIZED", `invalid webhook signature (${check.reason})`);
    const outcome = await settleWebhook(deps, parse(WebhookBody, raw));
    return c.json(ok({ outcome }));
  })
  .route("/", signed);

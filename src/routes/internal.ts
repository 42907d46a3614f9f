import { Hono } from "hono";
import type { z } from "zod";
import { AppError, ok } from "../errors.ts";
import { BODY_LIMITS, signedBody } from "../http/body.ts";
import { bounded } from "../http/slots.ts";
import { verifyQstash, type SignedEnv } from "../http/qstash.ts";
import { verifyWebhook } from "../payments/signature.ts";
import { closeOrders } from "../services/seckill/close.ts";
import { ShardNotConfigured } from "../services/seckill/outbox.ts";
import { ShardUnavailable } from "../services/seckill/shards.ts";
import { drainShop } from "../services/seckill/writer.ts";
import { settleWebhook } from "../services/seckill/payments.ts";
import type { AppEnv } from "../types.ts";
import { doc } from "../openapi/describe.ts";
import {
  CloseBody,
  DrainBody,
  LEGACY_ORDER_MESSAGES_UNTIL,
  LegacyWriteBody,
  ORDER_CLOSE_PATH,
  ORDER_DRAIN_PATH,
  ORDER_WRITE_PATH,
  PAYMENT_WEBHOOK_PATH,
  routeOf,
  WebhookBody,
} from "../queue/messages.ts";

/** Parses a verified raw body; malformed → 400, which QStash dead-letters after its retries. */
function parse<T extends z.ZodType>(schema: T, raw: string): z.infer<T> {
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw new AppError("INVALID_INPUT", "malformed JSON body");
  }
  const res = schema.safeParse(json);
  if (!res.success)
    throw new AppError("INVALID_INPUT", res.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "));
  return res.data;
}

/** How long a delivery naming a missing seckill shard is told to wait (as GET /admin/seckill says), s. */
const SHARD_MISSING_RETRY_SECONDS = 60;

/**
 * Runs a drain or close; a seckill shard this deployment does not configure (a valid index past
 * SECKILL_SHARD_URLS) is a 503 UNAVAILABLE naming it, with Retry-After: QStash retries, then
 * dead-letters for an operator, and nothing was written (the check precedes any call on that shard).
 */
async function inShards<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (err instanceof ShardNotConfigured || err instanceof ShardUnavailable)
      throw new AppError("UNAVAILABLE", err.message, { retryAfterSeconds: SHARD_MISSING_RETRY_SECONDS, cause: err });
    throw err;
  }
}

/**
 * A delayed close is due at its orders' payment deadline; it may arrive a little early (clock skew
 * between QStash and us), so the deadline check allows this much, ms. Orders not yet due are left
 * to close-expired.
 */
const CLOSE_EARLY_SLACK_MS = 5_000;

/** QStash deliveries: idempotent, verified against `Upstash-Signature` for their exact URL. */
const QSTASH = { tag: "callbacks", access: "qstash", errors: ["UNAUTHORIZED", "INVALID_INPUT"] } as const;
const SIGNED =
  "Sent by QStash (at least once); a malformed body is a 400, which QStash dead-letters after its retries.";
/** Drain and close name a seckill shard: one this deployment lacks is a 503 (inShards). */
const QSTASH_SHARDED = { ...QSTASH, errors: [...QSTASH.errors, "UNAVAILABLE"] } as const;
const SHARD_MISSING = ` A \`shard\` this deployment does not configure (SECKILL_SHARD_URLS) is a 503 UNAVAILABLE with Retry-After: ${SHARD_MISSING_RETRY_SECONDS} s.`;

const signed = new Hono<SignedEnv>()
  // Registered before the guard, so each delivery's body is read through its own cap (JSON only)
  // before the signature check reads it; the guard still covers every route below.
  .post(routeOf(ORDER_DRAIN_PATH), signedBody(BODY_LIMITS.drain, "upstash-signature"))
  .post(routeOf(ORDER_WRITE_PATH), signedBody(BODY_LIMITS.legacyWrite, "upstash-signature"))
  .post(routeOf(ORDER_CLOSE_PATH), signedBody(BODY_LIMITS.close, "upstash-signature"))
  .use(verifyQstash)
  .post(
    routeOf(ORDER_DRAIN_PATH),
    doc(
      {
        ...QSTASH_SHARDED,
        summary: "Write a shop's queued reservations (of one seckill shard, when named) to MySQL (the order writer)",
        description: SIGNED + SHARD_MISSING,
        body: DrainBody,
      },
      async (c) => {
        const body = parse(DrainBody, c.get("rawBody"));
        const res = await inShards(() =>
          drainShop(c.get("deps"), body.shopId, body.shard === undefined ? {} : { shard: body.shard }),
        );
        return c.json(ok(res));
      },
    ),
  )
  // Legacy: remove with LegacyWriteBody after LEGACY_ORDER_MESSAGES_UNTIL (queue/messages.ts).
  .post(
    routeOf(ORDER_WRITE_PATH),
    doc(
      {
        ...QSTASH,
        summary:
          "Per-order write messages still in flight from before the writer groups: treated as a drain of the shop",
        description: `${SIGNED} Legacy: accepted until ${LEGACY_ORDER_MESSAGES_UNTIL}.`,
        body: LegacyWriteBody,
      },
      async (c) => {
        const res = await drainShop(c.get("deps"), parse(LegacyWriteBody, c.get("rawBody")).shopId);
        return c.json(ok(res));
      },
    ),
  )
  .post(
    routeOf(ORDER_CLOSE_PATH),
    doc(
      {
        ...QSTASH_SHARDED,
        summary: "Close written orders left unpaid past their deadline, releasing their stock",
        description: SIGNED + SHARD_MISSING,
        body: CloseBody,
      },
      async (c) => {
        const deps = c.get("deps");
        const body = parse(CloseBody, c.get("rawBody"));
        const deadlineMs = deps.clock.now() - deps.config.ORDER_PAY_TIMEOUT_SECONDS * 1000 + CLOSE_EARLY_SLACK_MS;
        const res = await inShards(() =>
          closeOrders(deps, body.orderIds, { shopId: body.shopId, shard: body.shard, deadlineMs }),
        );
        return c.json(
          ok({
            cancelled: res.cancelled,
            cancelledBeforeWrite: res.cancelledBeforeWrite,
            released: res.released,
            outcomes: Object.fromEntries(res.outcomes),
          }),
        );
      },
    ),
  );

const WEBHOOK = {
  tag: "callbacks",
  summary: "Payment provider webhook: settles a payment or a refund",
  description:
    "Signed with PAYMENT_WEBHOOK_SECRET (`x-payment-signature: t=…,v1=…` over the raw body); older than PAYMENT_WEBHOOK_TOLERANCE_SECONDS is rejected. Beyond WEBHOOK_CONCURRENCY deliveries in progress per isolate, 503 with Retry-After before the body is read (the provider retries).",
  access: "webhook",
  body: WebhookBody,
  errors: ["UNAUTHORIZED", "INVALID_INPUT", "UNAVAILABLE"],
} as const;

export const internal = new Hono<AppEnv>()
  .post(
    routeOf(PAYMENT_WEBHOOK_PATH),
    bounded("webhooks", (deps) => deps.isolate.webhooks),
    signedBody(BODY_LIMITS.webhook, "x-payment-signature"),
    doc(WEBHOOK, async (c) => {
      const deps = c.get("deps");
      const raw = await c.req.text();
      const check = await verifyWebhook(
        deps.config.PAYMENT_WEBHOOK_SECRET,
        c.req.header("x-payment-signature"),
        raw,
        deps.clock.now(),
        deps.config.PAYMENT_WEBHOOK_TOLERANCE_SECONDS,
      );
      if (!check.ok) throw new AppError("UNAUTHORIZED", `invalid webhook signature (${check.reason})`);
      const outcome = await settleWebhook(deps, parse(WebhookBody, raw));
      return c.json(ok({ outcome }));
    }),
  )
  .route("/", signed);

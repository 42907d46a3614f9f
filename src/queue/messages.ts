/**
 * The order pipeline's edges in one place: for every message this app sends itself through QStash
 * (and the payment provider's webhook), the route path it targets, the zod schema that route parses
 * its body with, and the builder publishers use. A path is spelled here only; routes/internal.ts
 * registers these paths with these schemas, and tests/queue/messages.test.ts checks that every built
 * message parses with its route's schema and targets a registered route.
 * - drain `{ shopId, shard? }` → ORDER_DRAIN_PATH: "this shop's outbox has due reservations"
 *   (at most one per shop, shard and one-second window; the body carries no reservation);
 * - close `{ shopId, orderIds, shard? }` → ORDER_CLOSE_PATH, delayed by the payment timeout;
 * - payment webhook → PAYMENT_WEBHOOK_PATH, signed with PAYMENT_WEBHOOK_SECRET.
 * Legacy per-order shapes are still accepted until LEGACY_ORDER_MESSAGES_UNTIL; nothing builds them.
 * Details: docs/modules.md "queue/messages.ts".
 */
import { z } from "zod";
import type { Deps } from "../deps.ts";
import { MAX_SECKILL_SHARDS } from "../env.ts";
import type { WebhookEvent } from "../payments/provider.ts";
import { id64Text, OrderId } from "../util/ids.ts";

/** Where app.ts mounts routes/internal.ts. */
export const INTERNAL_BASE = "/internal";

export const ORDER_DRAIN_PATH = "/internal/orders/drain";
export const ORDER_CLOSE_PATH = "/internal/orders/close";
/** Legacy: remove after LEGACY_ORDER_MESSAGES_UNTIL (see the header). */
export const ORDER_WRITE_PATH = "/internal/orders/write";
export const PAYMENT_WEBHOOK_PATH = "/internal/payments/webhook";

/**
 * The legacy per-order shapes are accepted until this day (UTC), then their route, schema and
 * this constant go: three months after the grouped pipeline replaced them, far past QStash's
 * retries (ORDER_MESSAGE_RETRIES, backoff of hours at most) and any dead-letter replay we would do.
 */
export const LEGACY_ORDER_MESSAGES_UNTIL = "2027-03-01";

type InternalPath = `${typeof INTERNAL_BASE}/${string}`;

/** A path as routes/internal.ts registers it: relative to INTERNAL_BASE (literal types kept). */
export function routeOf<P extends InternalPath>(path: P): P extends `${typeof INTERNAL_BASE}${infer R}` ? R : never {
  return path.slice(INTERNAL_BASE.length) as P extends `${typeof INTERNAL_BASE}${infer R}` ? R : never;
}

/** The absolute URL QStash (or the provider) calls, and the one a QStash signature names. */
export function internalUrl(deps: Pick<Deps, "config">, path: string): string {
  return `${deps.config.PUBLIC_URL.replace(/\/$/, "")}${path}`;
}

/** One-second drain windows (QStash delays are whole seconds). */
export const DRAIN_WINDOW_MS = 1000;

export type QueueMessage = Parameters<Deps["queue"]["batchJSON"]>[0][number];

const ShopId = z.number().int().positive().max(Number.MAX_SAFE_INTEGER);
/** A seckill shard database's index (services/seckill/shards.ts); the route checks it is configured. */
const ShardIndex = z
  .number()
  .int()
  .min(0)
  .max(MAX_SECKILL_SHARDS - 1);

/** `{ shard }` for a shard's outbox, nothing for the main database's (the unsharded body is unchanged). */
const shardField = (shard: number | undefined) => (shard === undefined ? {} : { shard });
/** The part of a deduplication id naming the shard ("" for the main database: ids as before shards). */
const shardTag = (shard: number | undefined) => (shard === undefined ? "" : `-sh${shard}`);

// ---------------------------------------------------------------------------------------------
// Drain

/** Drain: names a shop's outbox (in the main database, or in seckill shard `shard`); what is written comes from it. */
export const DrainBody = z.object({ shopId: ShopId, shard: ShardIndex.optional() });
export type DrainBody = z.infer<typeof DrainBody>;

/**
 * The drain message of `shopId` (in shard `shard`, when given) for window `window`
 * (floor(ms / DRAIN_WINDOW_MS)), delivered after the window ends.
 */
export function drainMessage(deps: Pick<Deps, "config">, shopId: number, window: number, shard?: number): QueueMessage {
  return {
    url: internalUrl(deps, ORDER_DRAIN_PATH),
    body: { shopId, ...shardField(shard) } satisfies DrainBody,
    // One per shop (and shard) and window across all isolates: QStash drops the rest as duplicates.
    deduplicationId: `drain-s${shopId}${shardTag(shard)}-w${window}`,
    notBefore: Math.ceil(((window + 1) * DRAIN_WINDOW_MS) / 1000),
    retries: deps.config.ORDER_MESSAGE_RETRIES,
  };
}

/** A drain to deliver now (the sweep, a writer handing on its backlog); `tag` makes its deduplication id. */
export function drainNowMessage(deps: Pick<Deps, "config">, shopId: number, tag: string, shard?: number): QueueMessage {
  return {
    url: internalUrl(deps, ORDER_DRAIN_PATH),
    body: { shopId, ...shardField(shard) } satisfies DrainBody,
    deduplicationId: `drain-s${shopId}${shardTag(shard)}-${tag}`,
    retries: deps.config.ORDER_MESSAGE_RETRIES,
  };
}

/**
 * Legacy (remove after LEGACY_ORDER_MESSAGES_UNTIL): a per-order write message of the pipeline
 * before groups, still in flight at upgrade time; its route treats it as a drain of its shop.
 */
export const LegacyWriteBody = z.object({ shopId: ShopId, orderId: OrderId });

// ---------------------------------------------------------------------------------------------
// Close

/** The most order ids one close message carries (the writer's groups are smaller: ORDER_GROUP_MAX). */
export const CLOSE_MAX_ORDERS = 5000;

const GroupCloseBody = z.object({
  shopId: ShopId,
  orderIds: z.array(OrderId).min(1).max(CLOSE_MAX_ORDERS),
  shard: ShardIndex.optional(),
});
/** Legacy (remove after LEGACY_ORDER_MESSAGES_UNTIL): the per-order close, read as a group of one. */
const LegacyCloseBody = z
  .object({ orderId: OrderId, shopId: ShopId.optional() })
  .transform((b): { shopId: number | undefined; orderIds: string[]; shard?: number } => ({
    shopId: b.shopId,
    orderIds: [b.orderId],
  }));

/**
 * Close of a written group. Only ids and the shop travel; any other field (older messages carried
 * a whole reservation) is ignored — the closer reads MySQL and the outbox.
 */
export const CloseBody = z.union([GroupCloseBody, LegacyCloseBody]);

/** The delayed close of one written group (order ids of one shop, drained from shard `shard` when given). */
export function closeMessage(
  deps: Pick<Deps, "config">,
  shopId: number,
  orderIds: readonly string[],
  shard?: number,
): QueueMessage {
  return {
    url: internalUrl(deps, ORDER_CLOSE_PATH),
    body: { shopId, orderIds, ...shardField(shard) },
    delay: deps.config.ORDER_PAY_TIMEOUT_SECONDS,
    retries: deps.config.ORDER_MESSAGE_RETRIES,
  };
}

// ---------------------------------------------------------------------------------------------
// Payment webhook (built by the provider; payments/provider.ts WebhookEvent is its type)

export const WebhookBody = z.discriminatedUnion("type", [
  z.object({
    type: z.enum(["payment.succeeded", "payment.failed"]),
    paymentId: id64Text("not a payment id"),
    providerRef: z.string().max(128),
  }),
  z.object({
    type: z.enum(["refund.succeeded", "refund.failed"]),
    refundId: id64Text("not a refund id"),
    providerRef: z.string().max(128),
  }),
]) satisfies z.ZodType<WebhookEvent>;

// ---------------------------------------------------------------------------------------------

export interface MessageRoute {
  path: InternalPath;
  /** What the route parses the (verified) body with. */
  schema: z.ZodType;
  signedBy: "qstash" | "payment-provider";
  /** Nothing builds it any more; goes after LEGACY_ORDER_MESSAGES_UNTIL. */
  legacy?: boolean;
}

/** Every internal route a message targets, with the schema it parses bodies with (the contract test walks it). */
export const MESSAGE_ROUTES: readonly MessageRoute[] = [
  { path: ORDER_DRAIN_PATH, schema: DrainBody, signedBy: "qstash" },
  { path: ORDER_WRITE_PATH, schema: LegacyWriteBody, signedBy: "qstash", legacy: true },
  { path: ORDER_CLOSE_PATH, schema: CloseBody, signedBy: "qstash" },
  { path: PAYMENT_WEBHOOK_PATH, schema: WebhookBody, signedBy: "payment-provider" },
];

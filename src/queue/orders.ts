/**
 * Order messages through QStash. Two kinds, both to this app's signed /internal routes:
 *
 * - drain `{ shopId }` → /internal/orders/drain: "this shop's outbox has due reservations". The
 *   writer claims them from the outbox in groups (the body carries no reservation). Isolates send
 *   at most one per shop per one-second window, not before the window's end (`notBefore`, whole
 *   seconds) and with a deduplication id naming the window, so however many isolates and buyers a
 *   sale has, QStash delivers about one drain per shop per second, after every reservation of that
 *   window is in the outbox. A drain that found work announces the next window the same way (see
 *   writer.ts), which catches reservations a skewed isolate clock filed into a window already
 *   drained; the chain ends one quiet window after the last reservation.
 * - close `{ shopId, orderIds }` → /internal/orders/close, delayed by the payment timeout: one
 *   message per written group. The closer re-reads every order from MySQL (or the outbox).
 */
import type { Deps } from "../deps.ts";

export function internalUrl(deps: Pick<Deps, "config">, path: string): string {
  return `${deps.config.PUBLIC_URL.replace(/\/$/, "")}${path}`;
}

/** One-second drain windows (QStash delays are whole seconds). */
export const DRAIN_WINDOW_MS = 1000;

export type QueueMessage = Parameters<Deps["queue"]["batchJSON"]>[0][number];

/** The drain message of `shopId` for window `window` (floor(ms / DRAIN_WINDOW_MS)), delivered after the window ends. */
export function drainMessage(deps: Pick<Deps, "config">, shopId: number, window: number): QueueMessage {
  return {
    url: internalUrl(deps, "/internal/orders/drain"),
    body: { shopId },
    // One per shop and window across all isolates: QStash drops the rest as duplicates.
    deduplicationId: `drain-s${shopId}-w${window}`,
    notBefore: Math.ceil(((window + 1) * DRAIN_WINDOW_MS) / 1000),
    retries: deps.config.ORDER_MESSAGE_RETRIES,
  };
}

/** A drain to deliver now (the sweep, a writer handing on its backlog); `tag` makes its deduplication id. */
export function drainNowMessage(deps: Pick<Deps, "config">, shopId: number, tag: string): QueueMessage {
  return {
    url: internalUrl(deps, "/internal/orders/drain"),
    body: { shopId },
    deduplicationId: `drain-s${shopId}-${tag}`,
    retries: deps.config.ORDER_MESSAGE_RETRIES,
  };
}

/** The delayed close of one written group (order ids of one shop). */
export function closeMessage(deps: Pick<Deps, "config">, shopId: number, orderIds: readonly string[]): QueueMessage {
  return {
    url: internalUrl(deps, "/internal/orders/close"),
    body: { shopId, orderIds },
    delay: deps.config.ORDER_PAY_TIMEOUT_SECONDS,
    retries: deps.config.ORDER_MESSAGE_RETRIES,
  };
}

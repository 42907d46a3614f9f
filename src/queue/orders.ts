/**
 * Order messages through QStash: one batch call per reservation carries the write message
 * (deduplication id = order id, so a re-publish by the sweep is dropped by QStash while the first
 * is still known) and the delayed close message. Both land on this app's signed /internal routes.
 */
import type { Deps } from "../deps.ts";
import type { Reservation } from "../services/seckill/types.ts";

export function internalUrl(deps: Pick<Deps, "config">, path: string): string {
  return `${deps.config.PUBLIC_URL.replace(/\/$/, "")}${path}`;
}

/**
 * `resend` (the outbox sweep) gives the messages a per-pass deduplication id: the first publish
 * used the bare order id, and QStash would drop a re-send under the same id as a duplicate of a
 * message that was accepted but may never have been processed. The writer is idempotent.
 */
export async function publishReservation(deps: Deps, r: Reservation, opts: { withClose?: boolean; resend?: string } = {}): Promise<void> {
  const retries = deps.config.ORDER_MESSAGE_RETRIES;
  const dedup = opts.resend ? `${r.orderId}-resend-${opts.resend}` : r.orderId;
  const messages: Parameters<Deps["queue"]["batchJSON"]>[0] = [
    { url: internalUrl(deps, "/internal/orders/write"), body: r, deduplicationId: dedup, retries },
  ];
  if (opts.withClose ?? true) {
    messages.push({
      url: internalUrl(deps, "/internal/orders/close"),
      body: { orderId: r.orderId },
      delay: deps.config.ORDER_PAY_TIMEOUT_SECONDS,
      deduplicationId: `${dedup}-close`,
      retries,
    });
  }
  await deps.queue.batchJSON(messages);
}

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

export async function publishReservation(deps: Deps, r: Reservation, opts: { withClose?: boolean } = {}): Promise<void> {
  const retries = deps.config.ORDER_MESSAGE_RETRIES;
  const messages: Parameters<Deps["queue"]["batchJSON"]>[0] = [
    { url: internalUrl(deps, "/internal/orders/write"), body: r, deduplicationId: r.orderId, retries },
  ];
  if (opts.withClose ?? true) {
    messages.push({
      url: internalUrl(deps, "/internal/orders/close"),
      body: { orderId: r.orderId },
      delay: deps.config.ORDER_PAY_TIMEOUT_SECONDS,
      deduplicationId: `${r.orderId}-close`,
      retries,
    });
  }
  await deps.queue.batchJSON(messages);
}

/**
 * The payment-provider port. A provider accepts a charge or a refund and later reports the
 * outcome to our signed webhook (PAYMENT_WEBHOOK_PATH, queue/messages.ts) — asynchronously, like real ones.
 *
 * `LocalPaymentProvider` (dev/tests) is a real HTTP participant: after LOCAL_PAYMENT_DELAY_MS it
 * POSTs a signed webhook to PUBLIC_URL, declining LOCAL_PAYMENT_FAIL_RATE of the charges.
 */
import type { Config } from "../env.ts";
import type { Logger } from "../log.ts";
import { internalUrl, PAYMENT_WEBHOOK_PATH } from "../queue/messages.ts";
import { signWebhook } from "./signature.ts";

export interface ChargeRequest {
  paymentId: string;
  orderId: string;
  /** Cents. */
  amount: number;
}

export interface RefundRequest {
  refundId: string;
  paymentId: string;
  orderId: string;
  amount: number;
}

export type WebhookEvent =
  | { type: "payment.succeeded" | "payment.failed"; paymentId: string; providerRef: string }
  | { type: "refund.succeeded" | "refund.failed"; refundId: string; providerRef: string };

export interface PaymentProvider {
  /** Accepts the charge (resolves) or refuses it synchronously (rejects). The outcome comes by webhook. */
  charge(req: ChargeRequest, waitUntil: (p: Promise<unknown>) => void): Promise<{ providerRef: string }>;
  /**
   * Accepts the refund (resolves; `refund.succeeded`/`refund.failed` follows by webhook) or rejects.
   * Must be idempotent on `refundId` (the provider's idempotency key): the refund-retry job asks
   * again after a rejection, a `refund.failed`, or a request that was never reported on.
   */
  refund(req: RefundRequest, waitUntil: (p: Promise<unknown>) => void): Promise<{ providerRef: string }>;
}

export class LocalPaymentProvider implements PaymentProvider {
  constructor(
    private readonly opts: {
      webhookUrl: string;
      secret: string;
      delayMs: number;
      failRate: number;
      log: Logger;
      now: () => number;
      fetch?: typeof fetch;
    },
  ) {}

  async charge(req: ChargeRequest, waitUntil: (p: Promise<unknown>) => void): Promise<{ providerRef: string }> {
    const providerRef = `lp_${crypto.randomUUID()}`;
    const declined = Math.random() < this.opts.failRate;
    waitUntil(
      this.callBack({ type: declined ? "payment.failed" : "payment.succeeded", paymentId: req.paymentId, providerRef }),
    );
    return { providerRef };
  }

  async refund(req: RefundRequest, waitUntil: (p: Promise<unknown>) => void): Promise<{ providerRef: string }> {
    const providerRef = `lr_${crypto.randomUUID()}`;
    waitUntil(this.callBack({ type: "refund.succeeded", refundId: req.refundId, providerRef }));
    return { providerRef };
  }

  /** Delivers the webhook, retrying a few times like a real provider would (our handler is idempotent). */
  private async callBack(event: WebhookEvent): Promise<void> {
    await new Promise((r) => setTimeout(r, this.opts.delayMs));
    const body = JSON.stringify(event);
    for (let attempt = 0; attempt < 5; attempt++) {
      try {
        const res = await (this.opts.fetch ?? fetch)(this.opts.webhookUrl, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            "x-payment-signature": await signWebhook(this.opts.secret, body, this.opts.now()),
          },
          body,
        });
        if (res.ok) return;
        this.opts.log.warn("local payment webhook refused", { status: res.status, event: event.type });
      } catch (err) {
        this.opts.log.warn("local payment webhook failed", { err, event: event.type });
      }
      await new Promise((r) => setTimeout(r, 100 * 2 ** attempt));
    }
  }
}

export function createPaymentProvider(
  config: Config,
  log: Logger,
  now: () => number,
  fetchImpl?: typeof fetch,
): PaymentProvider {
  return new LocalPaymentProvider({
    webhookUrl: internalUrl({ config }, PAYMENT_WEBHOOK_PATH),
    secret: config.PAYMENT_WEBHOOK_SECRET,
    delayMs: config.LOCAL_PAYMENT_DELAY_MS,
    failRate: config.LOCAL_PAYMENT_FAIL_RATE,
    log,
    now,
    fetch: fetchImpl,
  });
}

/**
 * The refund-retry job (every minute, under its lock — see jobs/index.ts): asks the provider again
 * for every refund whose next attempt is due — after a rejected request, a `refund.failed`
 * webhook, or a request never reported on. The attempt logic, its CAS and the backoff live in
 * services/seckill/payments.ts; this only walks the due list.
 */
import type { Deps } from "../deps.ts";
import { attemptRefund, dueRefunds } from "../services/seckill/payments.ts";

/** Refunds per run; the rest stay due and are taken by the next run. */
const BATCH = 200;
/** Provider requests in flight at once. */
const PARALLEL = 8;

export interface RefundRetryResult {
  due: number;
  requested: number;
  failed: number;
  skipped: number;
}

export async function retryRefunds(deps: Deps, now: number): Promise<RefundRetryResult> {
  const due = await dueRefunds(deps, now, BATCH);
  const result: RefundRetryResult = { due: due.length, requested: 0, failed: 0, skipped: 0 };
  for (let i = 0; i < due.length; i += PARALLEL) {
    const outcomes = await Promise.all(
      due.slice(i, i + PARALLEL).map(async (r) => {
        try {
          return await attemptRefund(deps, r, now);
        } catch (err) {
          // A database error while recording: the row stays due (or in flight) and is taken again.
          deps.log.error("refund retry failed", { refundId: r.id, err });
          return "failed" as const;
        }
      }),
    );
    for (const o of outcomes) result[o]++;
  }
  return result;
}

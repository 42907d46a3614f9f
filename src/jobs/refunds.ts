/**
 * The refund-retry job (every minute, under its lock — see jobs/index.ts): asks the provider again
 * for every refund whose next attempt is due — after a rejected request, a `refund.failed`
 * webhook, or a request never reported on. The attempt logic, its CAS and the backoff live in
 * services/seckill/payments.ts; this only walks the due list.
 */
import type { Deps } from "../deps.ts";
import { attemptRefund, dueRefunds } from "../services/seckill/payments.ts";
import { metered, SubrequestBudget, SubrequestBudgetExceeded } from "../util/subrequests.ts";

/** Refunds per run at most; the rest stay due and are taken by the next run. */
const BATCH = 200;
/**
 * Provider requests in flight at once. Workers opens at most six connections per invocation and
 * queues the rest (while our per-call timeout runs); the cron invocation also runs the sweep,
 * close-expired and reconcile, one connection each: 3 + 3 = 6.
 */
export const REFUND_PARALLEL = 3;
/**
 * Subrequests of one attempt at most: the claiming UPDATE, the provider call (2 with the local
 * provider, which calls our webhook back from the same invocation) and the closing UPDATE.
 */
function refundCost(deps: Deps): number {
  return deps.config.PAYMENT_PROVIDER === "local" ? 4 : 3;
}

export interface RefundRetryResult {
  due: number;
  requested: number;
  failed: number;
  skipped: number;
}

export async function retryRefunds(deps: Deps, now: number, budget: SubrequestBudget = SubrequestBudget.forInvocation(deps)): Promise<RefundRetryResult> {
  const d = metered(deps, budget);
  // As many as this run's subrequests cover after the due read; the others wait for the next run.
  const take = Math.min(BATCH, Math.floor((budget.left - 1) / refundCost(deps)));
  if (take <= 0) return { due: 0, requested: 0, failed: 0, skipped: 0 };
  const due = await dueRefunds(d, now, take);
  const result: RefundRetryResult = { due: due.length, requested: 0, failed: 0, skipped: 0 };
  for (let i = 0; i < due.length; i += REFUND_PARALLEL) {
    const outcomes = await Promise.all(
      due.slice(i, i + REFUND_PARALLEL).map(async (r) => {
        try {
          return await attemptRefund(d, r, now);
        } catch (err) {
          // Refused before it was sent (never expected: the batch was sized to fit): due again next run.
          if (err instanceof SubrequestBudgetExceeded) return "skipped" as const;
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

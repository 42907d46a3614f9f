/**
 * Seckill attempts seen by this isolate, per voucher and outcome, for the console's live view.
 * Counted in memory (one Map lookup and an increment, no Redis call) on the routed seckill path and
 * by the fast lane for the answers it gives from memory. Numbers are per isolate, like its memory:
 * with several isolates (Workers) each console stream sees the isolate that serves it.
 */

/** Outcomes of `reserve` as the route answers them. */
export const OUTCOMES = ["ok", "SOLD_OUT", "DUPLICATE_ORDER", "RATE_LIMITED", "NOT_STARTED", "ENDED", "NOT_FOUND", "LIMIT_REACHED", "OUTCOME_UNKNOWN"] as const;
export type Outcome = (typeof OUTCOMES)[number];
export type OutcomeCounts = Record<Outcome, number>;

/** At most this many vouchers are tracked; the least recently counted one is dropped first. */
export const MAX_TRACKED_VOUCHERS = 1_000;

const zero = (): OutcomeCounts => ({ ok: 0, SOLD_OUT: 0, DUPLICATE_ORDER: 0, RATE_LIMITED: 0, NOT_STARTED: 0, ENDED: 0, NOT_FOUND: 0, LIMIT_REACHED: 0, OUTCOME_UNKNOWN: 0 });

export class SaleCounters {
  private readonly byVoucher = new Map<number, OutcomeCounts>();

  count(voucherId: number, outcome: Outcome): void {
    let c = this.byVoucher.get(voucherId);
    if (!c) {
      if (this.byVoucher.size >= MAX_TRACKED_VOUCHERS) {
        const oldest = this.byVoucher.keys().next().value;
        if (oldest !== undefined) this.byVoucher.delete(oldest);
      }
      c = zero();
      this.byVoucher.set(voucherId, c);
    }
    c[outcome]++;
  }

  /** A copy of a voucher's counts since this isolate started (zeros when none). */
  of(voucherId: number): OutcomeCounts {
    const c = this.byVoucher.get(voucherId);
    return c ? { ...c } : zero();
  }
}

/** Total attempts in a set of counts. */
export function attempts(c: OutcomeCounts): number {
  let n = 0;
  for (const o of OUTCOMES) n += c[o];
  return n;
}

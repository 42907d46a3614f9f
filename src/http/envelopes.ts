/**
 * Envelopes more than one layer answers with: the routed handlers and the fast lane
 * (http/fast-lane.ts) build the same bytes for the same outcome, so they build them here.
 */
import { type Envelope, fail, ok } from "../errors.ts";
import type { ReserveResult } from "../services/seckill/reserve.ts";

/** The 200 envelope of a reservation outcome (RATE_LIMITED and OUTCOME_UNKNOWN are thrown instead: 429 / 503). */
export function seckillEnvelope(
  res: Exclude<ReserveResult, { reason: "RATE_LIMITED" | "OUTCOME_UNKNOWN" }>,
): Envelope<string> {
  if (res.ok) return ok(res.orderId);
  // A buyer who already holds a unit is told which order it is (`data`), e.g. after a lost reply.
  if (res.reason === "DUPLICATE_ORDER" && res.orderId) return { ...fail(res.reason, res.message), data: res.orderId };
  return fail(res.reason, res.message);
}

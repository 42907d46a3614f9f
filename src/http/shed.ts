/**
 * Load shedding at the door: an isolate past what it can serve refuses the surplus before any
 * routing, body read or I/O — 503 `UNAVAILABLE` with `Retry-After: 1` — and serves the rest at
 * normal latency. Busy is not broken: a refused request did nothing (a refused seckill attempt
 * reserved nothing), so the client may simply retry.
 *
 * Signals (each 0 = off):
 *   SHED_MAX_IN_FLIGHT   requests this isolate has started and not yet answered (every runtime).
 *   SHED_MAX_LAG_MS      event-loop lag: how late a zero-delay timer ran, smoothed (Bun, Deno;
 *                        workerd's clock does not move during CPU work, so it reads 0 there and
 *                        the in-flight bound is what holds).
 * A lag probe is one timer at a time, at most every LAG_PROBE_EVERY_MS, started by a request; a
 * probe whose timer never ran (its request ended on workerd) is forgotten after LAG_PROBE_LOST_MS.
 */

/** Starts a lag probe at most this often, ms. */
const LAG_PROBE_EVERY_MS = 50;
/** A probe not back after this long is treated as lost, ms. */
const LAG_PROBE_LOST_MS = 1_000;
/** Weight of a new lag reading in the smoothed lag (exponential moving average). */
const LAG_ALPHA = 0.3;

export interface ShedOptions {
  maxInFlight: number;
  maxLagMs: number;
  /** Whether timer lateness means anything on this runtime (false on workerd). */
  measureLag: boolean;
}

/** This isolate's load: requests in flight, smoothed event-loop lag, and what was refused. */
export class LoadShedder {
  inFlight = 0;
  /** Highest `inFlight` seen. */
  peakInFlight = 0;
  /** Smoothed event-loop lag, ms. */
  lagMs = 0;
  /** Requests refused at the door, by reason. */
  readonly shed = { inFlight: 0, lag: 0 };
  private probeStartedAt = Number.NEGATIVE_INFINITY;
  private probing = false;

  constructor(private readonly opts: ShedOptions) {}

  /** Why a request arriving now is refused, or undefined when it is admitted (and counted in flight). */
  admit(): "inFlight" | "lag" | undefined {
    if (this.opts.maxInFlight > 0 && this.inFlight >= this.opts.maxInFlight) {
      this.shed.inFlight++;
      return "inFlight";
    }
    if (this.opts.measureLag && this.opts.maxLagMs > 0) {
      this.probeLag();
      if (this.lagMs > this.opts.maxLagMs) {
        this.shed.lag++;
        return "lag";
      }
    }
    this.inFlight++;
    if (this.inFlight > this.peakInFlight) this.peakInFlight = this.inFlight;
    return undefined;
  }

  /** An admitted request has been answered (or failed). */
  done(): void {
    this.inFlight = Math.max(0, this.inFlight - 1);
  }

  private probeLag(): void {
    const now = performance.now();
    if (this.probing && now - this.probeStartedAt < LAG_PROBE_LOST_MS) return;
    if (!this.probing && now - this.probeStartedAt < LAG_PROBE_EVERY_MS) return;
    this.probing = true;
    this.probeStartedAt = now;
    setTimeout(() => {
      const late = performance.now() - now;
      this.lagMs = this.lagMs * (1 - LAG_ALPHA) + late * LAG_ALPHA;
      this.probing = false;
    }, 0);
  }
}

/** The refusal: built per request (its id), no body read, no I/O. */
export function shedResponse(requestId: string): Response {
  return new Response(
    JSON.stringify({
      success: false,
      errorMsg: "the server is busy; try again shortly",
      code: "UNAVAILABLE",
      requestId,
    }),
    {
      status: 503,
      headers: {
        "content-type": "application/json; charset=UTF-8",
        "retry-after": "1",
        "x-request-id": requestId,
        "cache-control": "no-store",
      },
    },
  );
}

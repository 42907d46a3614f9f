/**
 * Closed-loop in-process load driver for non-HTTP scenarios (Redis protocol, SDK calls).
 *
 * `concurrency` loops each await one op, record its latency, and start the next, until the window
 * closes. This mirrors how request handlers use a shared client: many callers in flight on one
 * connection, each waiting for its own answer. Throughput and latency are measured in the same
 * process as the client library, so its CPU cost is part of the result (as it would be in the app).
 */
import type { Measurement } from "../types.ts";
import { withTimeout } from "./util.ts";

/**
 * Log-linear latency histogram (HdrHistogram-like) with bounded memory: values are stored in units
 * of 0.1 µs; below 25.6 µs each unit has its own bucket, above that every power of two is split
 * into 128 buckets (≤ 0.8 % relative error). Range up to ~7 minutes, far beyond any window.
 */
export class LatencyHistogram {
  private static readonly SUB_BITS = 7;
  private static readonly SUB = 1 << LatencyHistogram.SUB_BITS; // 128
  private static readonly LINEAR = 2 * LatencyHistogram.SUB; // 256 exact buckets
  private readonly counts = new Float64Array(4096);
  total = 0;

  recordMs(ms: number): void {
    const v = Math.max(0, Math.round(ms * 10_000)); // 0.1 µs units
    this.counts[this.index(v)]! += 1;
    this.total++;
  }

  private index(v: number): number {
    if (v < LatencyHistogram.LINEAR) return v;
    const exp = Math.floor(Math.log2(v));
    const shift = exp - LatencyHistogram.SUB_BITS;
    const sub = Math.floor(v / 2 ** shift) - LatencyHistogram.SUB;
    const idx = LatencyHistogram.LINEAR + (exp - 8) * LatencyHistogram.SUB + sub;
    return Math.min(idx, this.counts.length - 1);
  }

  /** Midpoint of the bucket, back in milliseconds. */
  private valueMs(idx: number): number {
    if (idx < LatencyHistogram.LINEAR) return idx / 10_000;
    const k = idx - LatencyHistogram.LINEAR;
    const exp = 8 + Math.floor(k / LatencyHistogram.SUB);
    const sub = k % LatencyHistogram.SUB;
    const width = 2 ** (exp - LatencyHistogram.SUB_BITS);
    const lower = (LatencyHistogram.SUB + sub) * width;
    return (lower + width / 2) / 10_000;
  }

  /** q in [0, 1]; NaN when empty. */
  percentileMs(q: number): number {
    if (this.total === 0) return Number.NaN;
    const rank = Math.max(1, Math.ceil(q * this.total));
    let seen = 0;
    for (let i = 0; i < this.counts.length; i++) {
      seen += this.counts[i]!;
      if (seen >= rank) return this.valueMs(i);
    }
    return this.valueMs(this.counts.length - 1);
  }
}

export interface ClosedLoopOptions {
  durationMs: number;
  concurrency: number;
  /** One operation. Rejections count as errors; the loop goes on. */
  op: (loop: number) => Promise<unknown>;
  /** Hard cap on ops per window, a safety net for an op that returns instantly. */
  maxOps?: number;
}

export async function closedLoop(opts: ClosedLoopOptions): Promise<Measurement> {
  const hist = new LatencyHistogram();
  const maxOps = opts.maxOps ?? 50_000_000;
  let started = 0;
  let errors = 0;
  let firstError: unknown;
  const t0 = performance.now();
  const deadline = t0 + opts.durationMs;

  const loop = async (id: number): Promise<void> => {
    while (started < maxOps) {
      const s = performance.now();
      if (s >= deadline) return;
      started++;
      try {
        await opts.op(id);
      } catch (e) {
        errors++;
        firstError ??= e;
      }
      hist.recordMs(performance.now() - s);
    }
  };

  // Ops in flight when the window closes are awaited (they finish in ms); the timeout only trips
  // if the client hangs, which would otherwise stall the whole run.
  await withTimeout(
    Promise.all(Array.from({ length: opts.concurrency }, (_, i) => loop(i))),
    opts.durationMs + 15_000,
    "closed-loop window",
  );
  const durationS = (performance.now() - t0) / 1000;
  if (errors > 0 && errors === hist.total) {
    throw new Error(
      `every op failed (${errors}); first error: ${String((firstError as Error)?.message ?? firstError)}`,
    );
  }
  return {
    requests: hist.total,
    errors,
    durationS,
    rps: hist.total / durationS,
    p50Ms: hist.percentileMs(0.5),
    p99Ms: hist.percentileMs(0.99),
  };
}

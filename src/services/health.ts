import type { Deps } from "../deps.ts";
import { type DependencyName, type GuardSnapshot, resilienceSnapshot } from "../resilience.ts";
import { scrubbedMessage } from "../util/scrub.ts";

export interface ProbeResult {
  ok: boolean;
  /** Round-trip time of the probe, milliseconds. */
  latencyMs: number;
  error?: string;
}

export interface HealthReport {
  ok: boolean;
  redis: ProbeResult;
  mysql: ProbeResult;
  /**
   * This isolate's circuit breakers (src/resilience.ts), per dependency. The probes above run
   * through them: an open breaker answers "circuit open" without probing, and after
   * BREAKER_HALF_OPEN_AFTER_MS a /health call may be the probe that closes it again.
   */
  breakers: Record<DependencyName, GuardSnapshot>;
}

/**
 * Runs one probe and times it. Each probe goes through its dependency's guard (src/resilience.ts),
 * whose adaptive deadline bounds it: a hung dependency reports "down" within that deadline, a far
 * one that answers reports "up".
 */
async function probe(run: () => Promise<unknown>): Promise<ProbeResult> {
  const started = performance.now();
  try {
    await run();
    return { ok: true, latencyMs: round(performance.now() - started) };
  } catch (err) {
    return { ok: false, latencyMs: round(performance.now() - started), error: scrubbedMessage(err) };
  }
}

const round = (ms: number) => Math.round(ms * 100) / 100;

/** Redis and MySQL are probed in parallel and reported separately; either down → not ok. */
export async function checkHealth(deps: Pick<Deps, "redis" | "db" | "isolate">): Promise<HealthReport> {
  const [redis, mysql] = await Promise.all([
    probe(async () => {
      const pong = await deps.redis.ping();
      if (pong !== "PONG") throw new Error(`unexpected PING reply ${JSON.stringify(pong)}`);
    }),
    probe(() => deps.db.execute("SELECT 1")),
  ]);
  return { ok: redis.ok && mysql.ok, redis, mysql, breakers: resilienceSnapshot(deps.isolate.resilience) };
}

/**
 * `unknown`: this isolate has no answer yet (its first probe is still running, on a runtime where
 * a caller may not wait for another request's probe); answered 503 with Retry-After 1.
 */
export type DependencyStatus = "up" | "degraded" | "down" | "unknown";

/** What anyone may know: per dependency up, degraded (answering, breaker not closed), down or unknown. */
export interface PublicHealth {
  ok: boolean;
  redis: DependencyStatus;
  mysql: DependencyStatus;
}

export function publicHealth(r: HealthReport): PublicHealth {
  const status = (p: ProbeResult, breaker: GuardSnapshot | undefined): DependencyStatus =>
    !p.ok ? "down" : breaker && breaker.state !== "closed" ? "degraded" : "up";
  return { ok: r.ok, redis: status(r.redis, r.breakers.redis), mysql: status(r.mysql, r.breakers.mysql) };
}

/** How long an isolate answers anonymous /health from its last probe, ms (a probe costs one PING and one query). */
export const PUBLIC_HEALTH_MEMO_MS = 1_000;

/** The isolate's anonymous /health memo (deps.isolate.publicHealth). */
export interface PublicHealthMemo {
  /** The last answer, and the clock time its probe started (ms). */
  report: PublicHealth | undefined;
  at: number;
  /** The probe in flight, if any, and when it started (ms): at most one per isolate. */
  probe: Promise<PublicHealth> | undefined;
  probeAt: number;
}

export const createPublicHealthMemo = (): PublicHealthMemo => ({
  report: undefined,
  at: 0,
  probe: undefined,
  probeAt: 0,
});

const NOT_YET: PublicHealth = { ok: false, redis: "unknown", mysql: "unknown" };

/**
 * Anonymous /health: the last answer while it is younger than PUBLIC_HEALTH_MEMO_MS, else the
 * answer of the isolate's one probe in flight — so a burst of callers costs at most one PING and
 * one query per isolate, however slow the dependencies are. A caller arriving while a probe runs
 * joins it where requests may share I/O (runtime `sharesIo`: Bun, Deno); on workerd it may not
 * await another request's fetch, so it gets the last answer (stale by at most the probe's
 * deadline, ≤ the larger of REDIS_TIMEOUT_MS and MYSQL_TIMEOUT_MS) or, during the isolate's very first probe, `unknown` (503, Retry-After 1):
 * probing on its own instead would let a burst at a fresh isolate hit a struggling database
 * once per caller, which is what the memo exists to prevent. A probe older than twice that
 * deadline counts as abandoned (on workerd a cancelled request's promise may never
 * settle) and the next caller starts a new one.
 */
export async function memoPublicHealth(deps: Pick<Deps, "redis" | "db" | "config" | "isolate" | "clock" | "runtime">) {
  const memo = deps.isolate.publicHealth;
  const now = deps.clock.now();
  if (memo.report && now - memo.at < PUBLIC_HEALTH_MEMO_MS) return memo.report;
  const abandonedAfterMs = 2 * Math.max(deps.config.REDIS_TIMEOUT_MS, deps.config.MYSQL_TIMEOUT_MS);
  if (memo.probe && now - memo.probeAt < abandonedAfterMs) {
    if (deps.runtime.sharesIo) return await memo.probe;
    return memo.report ?? NOT_YET;
  }
  const probe = checkHealth(deps).then((r) => {
    const report = publicHealth(r);
    // A newer probe (this one was given up as abandoned) has the last word.
    if (memo.probe === probe) {
      memo.report = report;
      memo.at = now;
    }
    return report;
  });
  memo.probe = probe;
  memo.probeAt = now;
  try {
    return await probe;
  } finally {
    if (memo.probe === probe) memo.probe = undefined;
  }
}

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

export type DependencyStatus = "up" | "degraded" | "down";

/** What anyone may know: per dependency up, degraded (answering, breaker not closed) or down. */
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

/**
 * Non-core features degrade first (src/resilience.ts): while Redis's breaker is open or probing,
 * the feed, likes and sign-in answer 503 + Retry-After at once, without a Redis call, so the
 * isolate's Redis budget (and the single half-open probe) goes to reads, sessions and seckill.
 * Placed before the handler (after auth: a warm session costs no Redis call).
 */
import { createMiddleware } from "hono/factory";
import type { AppEnv } from "../types.ts";

export function nonCore(feature: string) {
  return createMiddleware<AppEnv>(async (c, next) => {
    const guard = c.get("deps").isolate.resilience.redis;
    if (guard.degraded) throw guard.unavailable(feature);
    await next();
  });
}

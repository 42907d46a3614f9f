/**
 * Time in tests without sleeping (tests/support/no-long-sleeps.test.ts keeps it that way): clocks a
 * test moves (`deps.clock` via createTestApp's `clock` override, or a cache module's L1 clock via
 * createCaches' `now`), and forced expiry of Redis keys whose TTL a clock cannot move.
 */
import type { Redis } from "@upstash/redis";
import { eventually } from "./stack.ts";

export interface TestClock {
  now(): number;
  /** Moves the clock forward by `ms`. */
  advance(ms: number): void;
}

/** Stands still at `start` (epoch ms) until advanced: a window or TTL is crossed exactly. */
export function frozenClock(start = Date.now()): TestClock {
  let ms = start;
  return {
    now: () => ms,
    advance: (by) => {
      ms += by;
    },
  };
}

/**
 * Real time plus an offset the test advances: time still flows, for code that loops until a
 * deadline on the same clock (a cache reader waiting for another isolate's rebuild, cache/tiers.ts
 * awaitRebuild) and would wait forever on a frozen one.
 */
export function shiftedClock(): TestClock {
  let offset = 0;
  return {
    now: () => Date.now() + offset,
    advance: (by) => {
      offset += by;
    },
  };
}

/**
 * Forced expiry: each key's TTL ends now (PEXPIRE 1 ms) and Redis expires it itself, waited for
 * on the condition (the keys are gone), not for the TTL. A key that does not exist is an error:
 * expiring nothing would prove nothing.
 */
export async function expireNow(redis: Redis, ...keys: string[]): Promise<void> {
  for (const key of keys) {
    if ((await redis.pexpire(key, 1)) !== 1) throw new Error(`expireNow: ${key} does not exist`);
  }
  await eventually(`${keys.join(", ")} expired`, async () => (await redis.exists(...keys)) === 0, 2_000, 2);
}

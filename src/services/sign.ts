/**
 * Daily sign-in: one bitmap per user per month, `sign:{uid}:{yyyyMM}`, bit (day − 1) set when the
 * user signed that day. Days are calendar days in SERVICE_TIME_ZONE. 31 bits a month: a year of
 * sign-ins is 48 bytes per user.
 */
import type { Deps } from "../deps.ts";
import { keys } from "../redis/keys.ts";
import { dayParts } from "../util/time.ts";

const yyyyMM = (year: number, month: number) => `${year}${String(month).padStart(2, "0")}`;

/** Days in `month` (1-12) of `year`. */
function daysIn(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate();
}

/** Signs the user in for today; signing twice a day is harmless. Returns the day of month signed. */
export async function signToday(deps: Deps, userId: number): Promise<number> {
  const { year, month, day } = dayParts(deps.clock.now(), deps.config.SERVICE_TIME_ZONE);
  await deps.redis.setbit(keys.sign(userId, yyyyMM(year, month)), day - 1, 1);
  return day;
}

/** Consecutive 1 bits at the low end of `bits` (a month's days 1..n read as an n-bit number, day n lowest). */
function trailingOnes(bits: number, width: number): number {
  let n = 0;
  // Numbers here are < 2^31, so arithmetic is exact; `% 2` instead of `& 1` keeps to safe ints anyway.
  while (n < width && bits % 2 === 1) {
    n++;
    bits = Math.floor(bits / 2);
  }
  return n;
}

/** Oldest month a streak is followed back to (a sanity bound, ~100 years). */
const MAX_MONTHS = 1200;

/**
 * Consecutive signed days ending today (0 when today is not signed). A streak that reaches the 1st
 * of the month continues into the previous month's bitmap, and so on back.
 *
 * Each month is one `BITFIELD GET u{days} 0`: the first `days` bits as an unsigned number whose
 * lowest bit is the last day read, so trailing ones count backwards from that day.
 */
export async function signStreak(deps: Deps, userId: number): Promise<number> {
  let { year, month, day } = dayParts(deps.clock.now(), deps.config.SERVICE_TIME_ZONE);
  let total = 0;
  for (let i = 0; i < MAX_MONTHS; i++) {
    // An explicit pipeline: the auto-pipelining client cannot chain BITFIELD's builder (SDK 1.39).
    const [reply] = await deps.redis
      .pipeline()
      .bitfield(keys.sign(userId, yyyyMM(year, month)))
      .get(`u${day}`, 0)
      .exec()
      .exec<[number[]]>();
    const bits = reply?.[0] ?? 0;
    const run = trailingOnes(Number(bits), day);
    total += run;
    if (run < day) break;
    month -= 1;
    if (month === 0) {
      month = 12;
      year -= 1;
    }
    day = daysIn(year, month);
  }
  return total;
}

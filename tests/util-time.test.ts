import { expect, test } from "bun:test";
import { formatInZone } from "../src/util/time.ts";

/** Reference: Intl directly, no caching. */
const formatters = new Map<string, Intl.DateTimeFormat>();
function reference(ms: number, zone: string): string {
  const parts: Record<string, string> = {};
  let f = formatters.get(zone);
  if (!f) {
    f = new Intl.DateTimeFormat("en-CA", {
      timeZone: zone,
      hourCycle: "h23",
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit",
    });
    formatters.set(zone, f);
  }
  for (const p of f.formatToParts(new Date(ms))) parts[p.type] = p.value;
  return `${parts.year}-${parts.month}-${parts.day}T${parts.hour}:${parts.minute}:${parts.second}`;
}

test("cached zone offsets format exactly like Intl, across DST transitions and half-hour zones", () => {
  const zones = ["Asia/Shanghai", "UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata"];
  // Every 47 min 13 s through 2026 (phase drifts through every quarter hour), plus ±1 s around
  // each quarter hour of the days with transitions.
  const start = Date.UTC(2026, 0, 1);
  const end = Date.UTC(2027, 0, 1);
  const mismatches: string[] = [];
  const check = (ms: number, zone: string) => {
    const a = formatInZone(ms, zone);
    const b = reference(ms, zone);
    if (a !== b) mismatches.push(`${zone} ${new Date(ms).toISOString()}: ${a} ≠ ${b}`);
  };
  for (const zone of zones) {
    for (let ms = start; ms < end; ms += 2_833_000) check(ms, zone);
    for (const day of [
      Date.UTC(2026, 2, 8),
      Date.UTC(2026, 2, 29),
      Date.UTC(2026, 3, 5),
      Date.UTC(2026, 9, 4),
      Date.UTC(2026, 9, 25),
      Date.UTC(2026, 10, 1),
    ]) {
      for (let ms = day - 86_400_000; ms < day + 86_400_000; ms += 900_000) {
        check(ms - 1000, zone);
        check(ms, zone);
        check(ms + 1000, zone);
      }
    }
  }
  expect(mismatches).toEqual([]);
}, 30_000);

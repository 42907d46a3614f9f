/**
 * Time formatting for the API: MySQL DATETIMEs are stored in UTC; responses show
 * `YYYY-MM-DDTHH:mm:ss` in the service time zone (api.md "Dates").
 */
const formatters = new Map<string, Intl.DateTimeFormat>();

function formatter(zone: string): Intl.DateTimeFormat {
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
  return f;
}

/**
 * Offset of `zone` from UTC at `ms`, in ms. Intl formatting costs ~10 µs, too much for a per-request
 * path (UV day, sign-in day), so offsets are cached per 15-minute slot: real zone transitions fall
 * on :00/:15/:30/:45, so one offset holds for a whole slot. The cache is bounded by clearing.
 */
const SLOT_MS = 15 * 60_000;
const offsets = new Map<string, number>();

function zoneOffsetMs(ms: number, zone: string): number {
  const slot = Math.floor(ms / SLOT_MS) * SLOT_MS;
  const key = `${zone}|${slot}`;
  const cached = offsets.get(key);
  if (cached !== undefined) return cached;
  const parts: Record<string, string> = {};
  for (const p of formatter(zone).formatToParts(new Date(slot))) parts[p.type] = p.value;
  const asUtc = Date.UTC(
    Number(parts.year),
    Number(parts.month) - 1,
    Number(parts.day),
    Number(parts.hour),
    Number(parts.minute),
    Number(parts.second),
  );
  const offset = asUtc - slot;
  if (offsets.size > 10_000) offsets.clear();
  offsets.set(key, offset);
  return offset;
}

const pad = (n: number) => (n < 10 ? `0${n}` : String(n));

/** Epoch ms → `YYYY-MM-DDTHH:mm:ss` in `zone`. */
export function formatInZone(ms: number, zone: string): string {
  const d = new Date(ms + zoneOffsetMs(ms, zone));
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}T${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}`;
}

/** MySQL `YYYY-MM-DD HH:MM:SS[.ffffff]` (UTC) → epoch ms. */
export function parseSqlUtc(value: string): number {
  return Date.parse(`${value.replace(" ", "T")}Z`);
}

/** Epoch ms → MySQL DATETIME literal in UTC. */
export function toSqlUtc(ms: number): string {
  return new Date(ms).toISOString().slice(0, 19).replace("T", " ");
}

/** Calendar day `YYYYMMDD` / month `YYYYMM` / day-of-month of an instant in `zone`. */
export function dayParts(ms: number, zone: string): { year: number; month: number; day: number } {
  const s = formatInZone(ms, zone);
  return { year: Number(s.slice(0, 4)), month: Number(s.slice(5, 7)), day: Number(s.slice(8, 10)) };
}

/** Days in `month` (1–12) of `year` (proleptic Gregorian). */
/** yyyyMMdd of an instant in the service zone (the daily purchase limit's day). */
export function serviceDay(ms: number, zone: string): string {
  const d = dayParts(ms, zone);
  return `${d.year}${String(d.month).padStart(2, "0")}${String(d.day).padStart(2, "0")}`;
}

export function daysInMonth(year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/**
 * Years a parsed date may have: MySQL DATETIME's range (1000-01-01 … 9999-12-31). Also keeps clear
 * of `Date.UTC`'s two-digit-year rule (years 0–99 read as 1900–1999: `0099-01-01` became 1999).
 */
const MIN_YEAR = 1000;
const MAX_YEAR = 9999;

const DATE_RE = /^(\d{4})-(\d{2})-(\d{2})$/;
const DATE_TIME_RE = /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2}))?(?:\.(\d{1,3}))?(Z|[+-]\d{2}:?\d{2})?$/;

/** Epoch ms of a wall-clock time read as UTC, or null unless it names a real calendar moment. */
function wallClockMs(y: number, mo: number, d: number, h = 0, mi = 0, s = 0, ms = 0): number | null {
  if (y < MIN_YEAR || y > MAX_YEAR || mo < 1 || mo > 12 || d < 1 || d > daysInMonth(y, mo)) return null;
  if (h > 23 || mi > 59 || s > 59) return null;
  return Date.UTC(y, mo - 1, d, h, mi, s, ms);
}

/**
 * `YYYY-MM-DD` → epoch ms of its midnight UTC, or null unless it is a calendar date in 1000–9999
 * (no Feb 30, no month 13; `Date.parse` rolls those over or guesses).
 */
export function parseIsoDate(value: string): number | null {
  const m = DATE_RE.exec(value);
  return m ? wallClockMs(Number(m[1]), Number(m[2]), Number(m[3])) : null;
}

/**
 * `YYYY-MM-DDTHH:mm[:ss[.SSS]]` (a space instead of `T` is accepted) in `zone`, or with an explicit
 * `Z` / `±HH:MM` offset → epoch ms; null unless every field is in range for its calendar (no Feb 30,
 * no 24:00, no second 60, years 1000–9999). A local time skipped by a DST jump resolves forward.
 */
export function parseDateTime(value: string, zone: string): number | null {
  const m = DATE_TIME_RE.exec(value);
  if (!m) return null;
  const wall = wallClockMs(
    Number(m[1]),
    Number(m[2]),
    Number(m[3]),
    Number(m[4]),
    Number(m[5]),
    Number(m[6] ?? 0),
    Number((m[7] ?? "0").padEnd(3, "0")),
  );
  if (wall === null) return null;
  const off = m[8];
  if (off === "Z") return wall;
  if (off) {
    const oh = Number(off.slice(1, 3));
    const om = Number(off.slice(-2));
    if (oh > 18 || om > 59) return null;
    return wall - (off[0] === "-" ? -1 : 1) * (oh * 60 + om) * 60_000;
  }
  // Local time in `zone`: subtract the zone's offset at the guess, then re-check it at the result
  // (the two differ only next to a transition).
  const first = wall - zoneOffsetMs(wall, zone);
  const second = zoneOffsetMs(first, zone);
  return wall - second;
}

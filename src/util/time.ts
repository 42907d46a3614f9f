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
  const asUtc = Date.UTC(Number(parts.year), Number(parts.month) - 1, Number(parts.day), Number(parts.hour), Number(parts.minute), Number(parts.second));
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

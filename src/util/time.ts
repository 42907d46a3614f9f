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

/** Epoch ms → `YYYY-MM-DDTHH:mm:ss` in `zone`. */
export function formatInZone(ms: number, zone: string): string {
  const parts: Record<string, string> = {};
  for (const p of formatter(zone).formatToParts(new Date(ms))) parts[p.type] = p.value;
  return `${parts.year}-${parts.month}-${parts.day}T${parts.hour}:${parts.minute}:${parts.second}`;
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

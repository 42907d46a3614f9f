/** Small helpers shared by the runner and scenarios. */

const LOOPBACK = new Set(["127.0.0.1", "localhost", "[::1]", "::1"]);

/** The bench only ever loads loopback servers it started itself. */
export function assertLoopback(url: string): void {
  const host = new URL(url).hostname;
  if (!LOOPBACK.has(host)) throw new Error(`bench targets must be loopback, got ${url}`);
}

/** "5s", "500ms", "1m" or a bare number of seconds → milliseconds. */
export function parseDuration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text.trim());
  if (!m) throw new Error(`bad duration "${text}" (use e.g. 5s, 500ms, 1m)`);
  const n = Number(m[1]);
  const unit = m[2] ?? "s";
  return unit === "ms" ? n : unit === "s" ? n * 1000 : n * 60_000;
}

export function median(xs: readonly number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

/** Index of the element closest to the median (the "median round" of an odd or even count). */
export function medianIndex(xs: readonly number[]): number {
  const m = median(xs);
  let best = 0;
  for (let i = 1; i < xs.length; i++)
    if (Math.abs((xs[i] as number) - m) < Math.abs((xs[best] as number) - m)) best = i;
  return best;
}

/** 123456.7 → "123,457"; keeps the table readable. */
export function formatInt(n: number): string {
  return Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : "—";
}

/** Latency or ratio with about three significant digits. */
export function formatNum(n: number | undefined): string {
  if (n === undefined || !Number.isFinite(n)) return "—";
  if (n === 0) return "0";
  const a = Math.abs(n);
  if (a >= 100) return n.toFixed(0);
  if (a >= 10) return n.toFixed(1);
  if (a >= 1) return n.toFixed(2);
  return n.toFixed(3);
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Rejects if `p` does not settle within `ms`: every await on a child or socket is bounded. */
export async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Does a server answer `url` (any status below 500) within a second? For readiness polls. */
export async function answers(url: string): Promise<boolean> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(1000) });
    await res.arrayBuffer();
    return res.status < 500;
  } catch {
    return false; // not listening yet
  }
}

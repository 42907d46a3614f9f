/**
 * The cron of `npm run worker` (scripts/stack/cron-trigger.ts) on a clock the test moves: each
 * expression of wrangler.toml [triggers] is fired as `GET /__scheduled?cron=<expr>` at exactly the
 * times it names (UTC), at a real HTTP server standing in for wrangler dev's trigger route; every run
 * is logged in one line, and a failed run (a 500, nobody listening) is logged and does not stop the
 * schedule.
 */
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import {
  type CronClock,
  type CronTrigger,
  nextCronTime,
  scheduledTriggerUrl,
  startCronTriggers,
} from "../../scripts/stack/cron-trigger.ts";
import { wranglerSettings } from "../../scripts/stack/workerd.ts";
import { freePort } from "../../scripts/stack/engines.ts";
import { pollUntil } from "../support/child.ts";

/** A clock that only moves when the test says so; sleepers wake when it passes their time. */
class TestClock implements CronClock {
  private waiters: { at: number; wake: () => void }[] = [];
  constructor(private t: number) {}
  now(): number {
    return this.t;
  }
  sleepUntil(at: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (at <= this.t || signal.aborted) return resolve();
      const w = { at, wake: resolve };
      this.waiters.push(w);
      signal.addEventListener(
        "abort",
        () => {
          this.waiters = this.waiters.filter((x) => x !== w);
          resolve();
        },
        { once: true },
      );
    });
  }
  /** The times the schedule loops are waiting for, sorted. */
  pending(): string[] {
    return this.waiters.map((w) => new Date(w.at).toISOString()).sort();
  }
  moveTo(iso: string): void {
    this.t = Date.parse(iso);
    const due = this.waiters.filter((w) => w.at <= this.t);
    this.waiters = this.waiters.filter((w) => w.at > this.t);
    for (const w of due) w.wake();
  }
}

interface Hit {
  path: string;
  cron: string | null;
  method: string;
}

let server: ReturnType<typeof Bun.serve>;
let hits: Hit[] = [];
/** Status of the next answers, in order (then 200). */
let statuses: number[] = [];

beforeAll(() => {
  server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch(req) {
      const url = new URL(req.url);
      hits.push({ path: url.pathname, cron: url.searchParams.get("cron"), method: req.method });
      const status = statuses.shift() ?? 200;
      return new Response(status === 200 ? "Ran scheduled event" : "boom", { status });
    },
  });
});
afterAll(() => server.stop(true));

let running: CronTrigger | undefined;
afterEach(async () => {
  await running?.stop();
  running = undefined;
  hits = [];
  statuses = [];
});

const base = () => `http://127.0.0.1:${server.port}`;

function start(crons: string[], clock: TestClock, url = base()) {
  const lines: string[] = [];
  running = startCronTriggers({ url, crons, clock, log: (l) => lines.push(l), timeoutMs: 5_000 });
  return lines;
}

/** Waits until `n` runs were logged and every loop waits for its next tick again. */
async function settled(lines: string[], n: number, clock: TestClock, loops: number): Promise<void> {
  await pollUntil(
    `${n} cron runs logged and ${loops} loops waiting`,
    async () => lines.length >= n && clock.pending().length === loops,
    5_000,
    5,
  );
}

describe("npm run worker's cron trigger", () => {
  test("wrangler.toml's expressions parse, and `* * * * *` is every minute in UTC", () => {
    const { crons } = wranglerSettings();
    expect(crons.length).toBeGreaterThan(0);
    for (const c of crons) expect(() => nextCronTime(c, Date.now())).not.toThrow();
    expect(new Date(nextCronTime("* * * * *", Date.parse("2026-03-01T23:59:30.000Z"))).toISOString()).toBe(
      "2026-03-02T00:00:00.000Z",
    );
    // Exclusive of `after`: a tick is never fired twice.
    expect(new Date(nextCronTime("* * * * *", Date.parse("2026-03-01T10:00:00.000Z"))).toISOString()).toBe(
      "2026-03-01T10:01:00.000Z",
    );
    expect(scheduledTriggerUrl("http://127.0.0.1:8787/", "*/5 * * * *")).toBe(
      "http://127.0.0.1:8787/__scheduled?cron=*%2F5%20*%20*%20*%20*",
    );
  });

  test("`* * * * *` fires GET /__scheduled?cron=* * * * * once at each minute, and each run is logged in one line", async () => {
    const clock = new TestClock(Date.parse("2026-03-01T12:00:30.000Z"));
    const lines = start(["* * * * *"], clock);
    expect(clock.pending()).toEqual(["2026-03-01T12:01:00.000Z"]);
    clock.moveTo("2026-03-01T12:00:59.999Z");
    expect(hits).toEqual([]);
    for (const [i, minute] of ["12:01", "12:02", "12:03"].entries()) {
      clock.moveTo(`2026-03-01T${minute}:00.000Z`);
      await settled(lines, i + 1, clock, 1);
    }
    expect(hits).toEqual(Array.from({ length: 3 }, () => ({ path: "/__scheduled", cron: "* * * * *", method: "GET" })));
    expect(lines).toEqual([
      expect.stringMatching(
        /^cron \* \* \* \* \* \(2026-03-01T12:01:00\.000Z\): ran, 200 "Ran scheduled event" in \d+ ms$/,
      ),
      expect.stringMatching(/^cron \* \* \* \* \* \(2026-03-01T12:02:00\.000Z\): ran, 200/),
      expect.stringMatching(/^cron \* \* \* \* \* \(2026-03-01T12:03:00\.000Z\): ran, 200/),
    ]);
    expect(clock.pending()).toEqual(["2026-03-01T12:04:00.000Z"]);
  });

  test("each expression fires at its own times only", async () => {
    const clock = new TestClock(Date.parse("2026-03-01T02:54:30.000Z"));
    const lines = start(["*/5 * * * *", "0 3 * * *"], clock);
    expect(clock.pending()).toEqual(["2026-03-01T02:55:00.000Z", "2026-03-01T03:00:00.000Z"]);
    let runs = 0;
    for (let m = 55; m <= 66; m++) {
      const at = new Date(Date.parse("2026-03-01T02:00:00.000Z") + m * 60_000).toISOString();
      clock.moveTo(at);
      runs += (m % 5 === 0 ? 1 : 0) + (m === 60 ? 1 : 0);
      await settled(lines, runs, clock, 2);
    }
    expect(hits.map((h) => h.cron).sort()).toEqual(["*/5 * * * *", "*/5 * * * *", "*/5 * * * *", "0 3 * * *"]);
    expect(lines.filter((l) => l.startsWith("cron 0 3 * * * (2026-03-01T03:00:00.000Z): ran, 200"))).toHaveLength(1);
    expect(lines.filter((l) => l.startsWith("cron */5 * * * *")).map((l) => l.slice(17, 43))).toEqual([
      "(2026-03-01T02:55:00.000Z)",
      "(2026-03-01T03:00:00.000Z)",
      "(2026-03-01T03:05:00.000Z)",
    ]);
    expect(clock.pending()).toEqual(["2026-03-01T03:10:00.000Z", "2026-03-02T03:00:00.000Z"]);
  });

  test("a failed run — a 500, or nobody listening — is logged as FAILED and the next tick still fires", async () => {
    const clock = new TestClock(Date.parse("2026-03-01T12:00:30.000Z"));
    statuses = [500];
    const lines = start(["* * * * *"], clock);
    clock.moveTo("2026-03-01T12:01:00.000Z");
    await settled(lines, 1, clock, 1);
    clock.moveTo("2026-03-01T12:02:00.000Z");
    await settled(lines, 2, clock, 1);
    expect(lines[0]).toMatch(/^cron \* \* \* \* \* \(2026-03-01T12:01:00\.000Z\): FAILED, 500 "boom" in \d+ ms$/);
    expect(lines[1]).toMatch(/\(2026-03-01T12:02:00\.000Z\): ran, 200/);
    await running?.stop();

    const nobody = new TestClock(Date.parse("2026-03-01T12:00:30.000Z"));
    const refused = start(["* * * * *"], nobody, `http://127.0.0.1:${await freePort()}`);
    nobody.moveTo("2026-03-01T12:01:00.000Z");
    await settled(refused, 1, nobody, 1);
    nobody.moveTo("2026-03-01T12:02:00.000Z");
    await settled(refused, 2, nobody, 1);
    for (const l of refused) expect(l).toMatch(/^cron \* \* \* \* \* \(2026-03-01T12:0[12]:00\.000Z\): FAILED, \S/);
  });

  test("a bad expression is refused before anything is scheduled; stop() ends the schedule", async () => {
    const clock = new TestClock(Date.parse("2026-03-01T12:00:30.000Z"));
    expect(() => start(["* * * * *", "61 * * * *"], clock)).toThrow();
    expect(clock.pending()).toEqual([]);
    const lines = start(["* * * * *"], clock);
    await running?.stop();
    running = undefined;
    clock.moveTo("2026-03-01T12:05:00.000Z");
    expect(clock.pending()).toEqual([]);
    expect(lines).toEqual([]);
    expect(hits).toEqual([]);
  });
});

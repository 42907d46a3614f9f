/**
 * The cron of wrangler.toml [triggers] for a Worker under `wrangler dev --test-scheduled`, which fires
 * nothing by itself: for each expression, `GET <url>/__scheduled?cron=<expr>` at every time the
 * expression names, in UTC as on Workers (next times from Bun.cron.parse, the runtime's own 5-field
 * parser, the one src/entry/bun.ts schedules with).
 *
 * Each run is logged in one line when it ends (status and the start of the answer, or the error). A
 * failed run is logged, never fatal, and delays nothing: runs do not wait for each other (on Workers
 * every tick is its own scheduled event). A tick that passed while the process was suspended is
 * skipped, not caught up. The clock is injected, so a test drives the schedule without waiting minutes.
 */

export interface CronClock {
  now(): number;
  /** Resolves at `at` (epoch ms), or at once when `signal` is aborted. */
  sleepUntil(at: number, signal: AbortSignal): Promise<void>;
}

export const systemClock: CronClock = {
  now: () => Date.now(),
  sleepUntil: (at, signal) =>
    new Promise<void>((resolve) => {
      if (signal.aborted) return resolve();
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, at - Date.now()));
      signal.addEventListener("abort", done, { once: true });
    }),
};

/** The first time after `after` (epoch ms, exclusive) that `cron` names, in UTC; throws on a bad expression. */
export function nextCronTime(cron: string, after: number): number {
  const next = Bun.cron.parse(cron, after, { tz: "UTC" });
  if (!next) throw new Error(`cron expression ${JSON.stringify(cron)} names no time in the next 8 years`);
  return next.getTime();
}

/** wrangler dev's scheduled-event trigger (`--test-scheduled`) on the Worker at `base`. */
export function scheduledTriggerUrl(base: string, cron: string): string {
  return `${base.replace(/\/$/, "")}/__scheduled?cron=${encodeURIComponent(cron)}`;
}

export interface CronTriggerOptions {
  /** The Worker, e.g. `http://127.0.0.1:8787`. */
  url: string;
  /** 5-field expressions (wrangler.toml [triggers] crons). */
  crons: readonly string[];
  log: (line: string) => void;
  clock?: CronClock;
  /** Deadline of one run's request, ms (default 120 s; the Worker's jobs run in its waitUntil). */
  timeoutMs?: number;
}

export interface CronTrigger {
  /** Stops scheduling and aborts the runs in flight; resolves once every loop and run has ended. */
  stop(): Promise<void>;
}

/** Starts one schedule loop per expression; every expression is validated before anything is scheduled. */
export function startCronTriggers(opts: CronTriggerOptions): CronTrigger {
  const clock = opts.clock ?? systemClock;
  const timeoutMs = opts.timeoutMs ?? 120_000;
  for (const cron of opts.crons) nextCronTime(cron, clock.now());
  const stopped = new AbortController();
  const inFlight = new Set<Promise<void>>();

  const fire = async (cron: string, tick: number): Promise<void> => {
    const at = new Date(tick).toISOString();
    const started = clock.now();
    try {
      const res = await fetch(scheduledTriggerUrl(opts.url, cron), {
        signal: AbortSignal.any([stopped.signal, AbortSignal.timeout(timeoutMs)]),
      });
      const body = (await res.text()).trim().replace(/\s+/g, " ").slice(0, 120);
      const ok = res.status >= 200 && res.status < 300;
      opts.log(
        `cron ${cron} (${at}): ${ok ? "ran" : "FAILED"}, ${res.status} ${JSON.stringify(body)} in ${clock.now() - started} ms`,
      );
    } catch (err) {
      if (stopped.signal.aborted) return;
      opts.log(`cron ${cron} (${at}): FAILED, ${err instanceof Error ? err.message : String(err)}`);
    }
  };

  const loop = async (cron: string): Promise<void> => {
    let tick = nextCronTime(cron, clock.now());
    while (!stopped.signal.aborted) {
      await clock.sleepUntil(tick, stopped.signal);
      if (stopped.signal.aborted) return;
      const run = fire(cron, tick);
      inFlight.add(run);
      void run.finally(() => inFlight.delete(run));
      // The next tick after both this one and now: ticks that passed meanwhile are skipped.
      tick = nextCronTime(cron, Math.max(tick, clock.now()));
    }
  };

  const loops = opts.crons.map((cron) => loop(cron));
  return {
    async stop() {
      stopped.abort();
      await Promise.allSettled([...loops, ...inFlight]);
    },
  };
}

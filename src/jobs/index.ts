/**
 * Cron jobs: one implementation, triggered by Workers `[triggers]` (entry/worker.ts `scheduled`),
 * `Bun.cron` (entry/bun.ts) and `Deno.cron` (entry/deno.ts). Each job is a function of deps and
 * the trigger time; overlapping runs are prevented inside each job with a Redis lock.
 */
import type { Deps } from "../deps.ts";
import { withLock } from "../redis/lock.ts";
import { closeExpired, sweepOutbox } from "./orders.ts";
import { reconcile } from "../services/seckill/reconcile.ts";
import { retryRefunds } from "./refunds.ts";

export interface CronJob {
  name: string;
  /** 5-field cron expression; must also be listed in wrangler.toml `[triggers] crons`. */
  cron: string;
  /** Upper bound of one run, milliseconds: the lock expires after it even if the isolate dies. */
  maxRunMs: number;
  run(deps: Deps, now: number): Promise<unknown>;
}

export const cronJobs: CronJob[] = [
  { name: "sweep-outbox", cron: "* * * * *", maxRunMs: 55_000, run: (deps, now) => sweepOutbox(deps, now) },
  { name: "close-expired", cron: "* * * * *", maxRunMs: 55_000, run: (deps, now) => closeExpired(deps, now) },
  { name: "reconcile", cron: "* * * * *", maxRunMs: 55_000, run: (deps, now) => reconcile(deps, now) },
  { name: "refund-retry", cron: "* * * * *", maxRunMs: 55_000, run: (deps, now) => retryRefunds(deps, now) },
];

/** Runs every job bound to `cron` (all when undefined), each under its lock; one failure does not stop the others. */
export async function runCron(
  deps: Deps,
  cron: string | undefined,
  now: number,
  jobs: readonly CronJob[] = cronJobs,
): Promise<{ name: string; ok: boolean; skipped?: boolean }[]> {
  const due = jobs.filter((j) => cron === undefined || j.cron === cron);
  return await Promise.all(
    due.map(async (job) => {
      try {
        // The lock keeps two triggers (two isolates, a slow previous run) from overlapping.
        const res = await withLock(deps.redis, `cron:${job.name}`, job.maxRunMs, () => job.run(deps, now));
        return res.ran ? { name: job.name, ok: true } : { name: job.name, ok: true, skipped: true };
      } catch (err) {
        deps.log.error("cron job failed", { job: job.name, err });
        return { name: job.name, ok: false };
      }
    }),
  );
}

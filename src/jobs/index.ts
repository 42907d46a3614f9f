/**
 * The cron table: which service function runs when, under which lock — nothing else lives here
 * (the jobs are services: sweepOutbox in services/seckill/pipeline.ts, closeExpired in close.ts,
 * reconcile in reconcile.ts, retryRefunds in payments.ts). One implementation, triggered by
 * Workers `[triggers]` (entry/worker.ts `scheduled`), `Bun.cron` (entry/bun.ts) and `Deno.cron`
 * (entry/deno.ts); operators run one now through runJobNow (the same lock). Each job is a
 * function of deps and the trigger time; overlapping runs are prevented with a Redis lock per job.
 *
 * One trigger is one Workers invocation for every job bound to it, so they share its subrequests
 * (WORKERS_SUBREQUEST_LIMIT): each job run gets an equal share of the invocation's cap, minus its
 * lock's own commands, and stops at it (the rest is taken by the next run). Where the cap cannot
 * give every due job MIN_JOB_SHARE (Workers Free: 50), the jobs take turns: as many as fit run per
 * trigger, chosen round-robin by the trigger's minute. Each job also keeps at
 * most a few connections open, so together they stay within Workers' six per invocation:
 * sweep, close-expired and reconcile one at a time each, refund-retry REFUND_PARALLEL.
 */
import type { Deps } from "../deps.ts";
import { withLock } from "../redis/lock.ts";
import { invocationCap, metered, SubrequestBudget, SubrequestBudgetExceeded } from "../ports/subrequests.ts";
import { closeCost, closeExpired } from "../services/seckill/close.ts";
import { retryRefunds } from "../services/seckill/payments.ts";
import { sweepOutbox } from "../services/seckill/pipeline.ts";
import { reconcile } from "../services/seckill/reconcile.ts";

export interface CronJob {
  name: string;
  /** 5-field cron expression; must also be listed in wrangler.toml `[triggers] crons`. */
  cron: string;
  /** Upper bound of one run, milliseconds: the lock expires after it even if the isolate dies. */
  maxRunMs: number;
  /** `budget`: this job's share of the invocation's subrequests (runCron gives one). */
  run(deps: Deps, now: number, budget?: SubrequestBudget): Promise<unknown>;
}

/** Lock TTL of the every-minute jobs, ms: under the minute, so a dead run never blocks the next trigger. */
export const MINUTE_JOB_MAX_RUN_MS = 55_000;

/** The Redis lock a job runs under (redis/lock.ts prefixes it), for cron triggers and runJobNow alike. */
export function cronLockName(job: Pick<CronJob, "name">): string {
  return `cron:${job.name}`;
}

export const cronJobs = [
  {
    name: "sweep-outbox",
    cron: "* * * * *",
    maxRunMs: MINUTE_JOB_MAX_RUN_MS,
    run: (deps: Deps, now: number, budget?: SubrequestBudget) => sweepOutbox(deps, now, budget),
  },
  {
    name: "close-expired",
    cron: "* * * * *",
    maxRunMs: MINUTE_JOB_MAX_RUN_MS,
    run: (deps: Deps, now: number, budget?: SubrequestBudget) => closeExpired(deps, now, budget),
  },
  // Reconcile runs on metered ports: past its share a call is refused before it is sent, and the
  // pass ends there (every step is safe to stop after; the next run starts over). It has no cursor
  // yet, so a registry whose pass needs more than the share is only partly reconciled per run.
  // Run by an operator (runJobNow, no budget) it is unmetered, as before.
  {
    name: "reconcile",
    cron: "* * * * *",
    maxRunMs: MINUTE_JOB_MAX_RUN_MS,
    run: (deps: Deps, now: number, budget?: SubrequestBudget) => reconcile(budget ? metered(deps, budget) : deps, now),
  },
  {
    name: "refund-retry",
    cron: "* * * * *",
    maxRunMs: MINUTE_JOB_MAX_RUN_MS,
    run: (deps: Deps, now: number, budget?: SubrequestBudget) => retryRefunds(deps, now, budget),
  },
] as const satisfies readonly CronJob[];

type TableJob = (typeof cronJobs)[number];
export type CronJobName = TableJob["name"];
/** What job `N` resolves to. */
export type JobResult<N extends CronJobName> = Awaited<ReturnType<Extract<TableJob, { name: N }>["run"]>>;

/**
 * Runs one job of the table now (operators: POST /admin/reconcile, the console), under the same
 * lock as its cron runs, with no subrequest share (an operator request is not a cron invocation).
 * `{ ran: false }` when a run holds the lock.
 */
export async function runJobNow<N extends CronJobName>(
  deps: Deps,
  name: N,
  now = deps.clock.now(),
): Promise<{ ran: true; value: JobResult<N> } | { ran: false }> {
  const job = cronJobs.find((j) => j.name === name) as CronJob;
  return (await withLock(deps.redis, cronLockName(job), job.maxRunMs, () => job.run(deps, now))) as
    | { ran: true; value: JobResult<N> }
    | { ran: false };
}

/** A job's lock: SET NX and the unlock script (+1 should the script need loading). */
const LOCK_COST = 3;
/**
 * The smallest share worth a run: the lock and close-expired's smallest step (a page read, one
 * voucher's close — close.ts closeCost — and the registry read).
 */
export const MIN_JOB_SHARE = LOCK_COST + 1 + closeCost(1, { outbox: false }) + 1;

/** The due jobs that run at `now`: all when the cap allows MIN_JOB_SHARE each, else a minute's turn. */
function jobsThisRun(due: readonly CronJob[], cap: number, now: number): readonly CronJob[] {
  const fit = Math.max(1, Math.floor(cap / MIN_JOB_SHARE));
  if (fit >= due.length) return due;
  const start = (Math.floor(now / 60_000) * fit) % due.length;
  return Array.from({ length: fit }, (_, i) => due[(start + i) % due.length] as CronJob);
}

/** Runs every job bound to `cron` (all when undefined), each under its lock; one failure does not stop the others. */
export async function runCron(
  deps: Deps,
  cron: string | undefined,
  now: number,
  jobs: readonly CronJob[] = cronJobs,
): Promise<{ name: string; ok: boolean; skipped?: boolean }[]> {
  const due = jobs.filter((j) => cron === undefined || j.cron === cron);
  const cap = invocationCap(deps);
  const run = jobsThisRun(due, cap, now);
  const share = Math.floor(cap / Math.max(1, run.length)) - LOCK_COST;
  return await Promise.all(
    due.map(async (job) => {
      if (!run.includes(job)) return { name: job.name, ok: true, skipped: true };
      const budget = new SubrequestBudget(Math.max(0, share));
      try {
        // The lock keeps two triggers (two isolates, a slow previous run) from overlapping.
        const res = await withLock(deps.redis, cronLockName(job), job.maxRunMs, () => job.run(deps, now, budget));
        return res.ran ? { name: job.name, ok: true } : { name: job.name, ok: true, skipped: true };
      } catch (err) {
        if (err instanceof SubrequestBudgetExceeded) {
          // Stopped before a call that would not fit: what is left waits for the next run.
          deps.log.warn("cron job stopped at its subrequest share; the next run continues", {
            job: job.name,
            cap: err.cap,
          });
          return { name: job.name, ok: true };
        }
        deps.log.error("cron job failed", { job: job.name, err });
        return { name: job.name, ok: false };
      }
    }),
  );
}

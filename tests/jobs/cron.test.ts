import { expect, test } from "bun:test";
import { runCron, type CronJob } from "../../src/jobs/index.ts";
import { within } from "../support/child.ts";
import { createTestApp } from "../support/stack.ts";

test("cron runs each due job once even when two triggers fire together, and isolates a failing job", async () => {
  const { deps } = await createTestApp();
  let runs = 0;
  const tag = crypto.randomUUID();
  // The slow job holds its run open until the test lets it finish: the two triggers overlap for
  // as long as the test needs, not for a guessed duration.
  let finish = () => {};
  const held = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const jobs: CronJob[] = [
    {
      name: `slow-${tag}`,
      cron: "* * * * *",
      maxRunMs: 10_000,
      run: async () => {
        runs++;
        await held;
      },
    },
    { name: `failing-${tag}`, cron: "* * * * *", maxRunMs: 10_000, run: async () => Promise.reject(new Error("boom")) },
    {
      name: `hourly-${tag}`,
      cron: "0 * * * *",
      maxRunMs: 10_000,
      run: async () => Promise.reject(new Error("must not run")),
    },
  ];
  const a = runCron(deps, "* * * * *", Date.now(), jobs);
  const b = runCron(deps, "* * * * *", Date.now(), jobs);
  try {
    // The trigger that found the slow job's lock taken answers while the other is still inside the job.
    const first = await within(10_000, "one trigger to finish while the other runs the slow job", Promise.race([a, b]));
    expect(runs).toBe(1);
    expect(first.find((r) => r.name === `slow-${tag}`)).toEqual({ name: `slow-${tag}`, ok: true, skipped: true });
  } finally {
    finish();
  }
  const both = (await Promise.all([a, b])).flat();
  expect(runs).toBe(1);
  const slow = both.filter((r) => r.name === `slow-${tag}`);
  expect(slow).toEqual(
    expect.arrayContaining([
      { name: `slow-${tag}`, ok: true },
      { name: `slow-${tag}`, ok: true, skipped: true },
    ]),
  );
  expect(slow.length).toBe(2);
  // The failing job ran (in one trigger, or in both if the second asked after the first had
  // released its lock) and failed alone: reported failed where it ran, the slow job above still ok.
  const ranFailing = both.filter((r) => r.name === `failing-${tag}` && !r.skipped);
  expect(ranFailing.length).toBeGreaterThanOrEqual(1);
  expect(ranFailing.every((r) => r.ok === false)).toBe(true);
  expect(both.some((r) => r.name === `hourly-${tag}`)).toBe(false);
});

import { expect, test } from "bun:test";
import { runCron, type CronJob } from "../../src/jobs/index.ts";
import { createTestApp } from "../support/stack.ts";

test("cron runs each due job once even when two triggers fire together, and isolates a failing job", async () => {
  const { deps } = await createTestApp();
  let runs = 0;
  const tag = crypto.randomUUID();
  const jobs: CronJob[] = [
    {
      name: `slow-${tag}`,
      cron: "* * * * *",
      maxRunMs: 10_000,
      run: async () => {
        runs++;
        await new Promise((r) => setTimeout(r, 200));
      },
    },
    { name: `failing-${tag}`, cron: "* * * * *", maxRunMs: 10_000, run: async () => Promise.reject(new Error("boom")) },
    { name: `hourly-${tag}`, cron: "0 * * * *", maxRunMs: 10_000, run: async () => Promise.reject(new Error("must not run")) },
  ];
  const [a, b] = await Promise.all([runCron(deps, "* * * * *", Date.now(), jobs), runCron(deps, "* * * * *", Date.now(), jobs)]);
  expect(runs).toBe(1);
  const slow = [...(a ?? []), ...(b ?? [])].filter((r) => r.name === `slow-${tag}`);
  expect(slow.filter((r) => r.skipped).length).toBe(1);
  expect(a?.find((r) => r.name === `failing-${tag}`)?.ok).toBe(false);
  expect(a?.some((r) => r.name === `hourly-${tag}`)).toBe(false);
});

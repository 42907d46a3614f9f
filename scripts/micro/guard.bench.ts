/**
 * The cost of one dependency call's guard (deadline + breaker, src/resilience.ts) with no I/O:
 * `bun scripts/micro/guard.bench.ts [path/to/resilience.ts]` — µs per `Guard.run` of an
 * immediately resolved call, median of 5 rounds of 200,000. Pass another checkout's module to
 * compare two versions in one run (e.g. a `git worktree` of the base commit).
 */
import { resolve } from "node:path";

const path = resolve(process.argv[2] ?? `${import.meta.dir}/../../src/resilience.ts`);
const { Guard } = await import(path);
// Options both versions understand (older guards read `threshold`, newer ones `minCalls`).
const g = new Guard("redis", { timeoutMs: 250, threshold: 5, minCalls: 10, halfOpenAfterMs: 5000, floorMs: 250 });
const N = 200_000;
const call = async () => 1;
for (let i = 0; i < 20_000; i++) await g.run(call);
const rounds: number[] = [];
for (let r = 0; r < 5; r++) {
  const t0 = performance.now();
  for (let i = 0; i < N; i++) await g.run(call);
  rounds.push(((performance.now() - t0) * 1000) / N);
}
rounds.sort((a, b) => a - b);
console.log(
  `${path}: ${(rounds[2] as number).toFixed(3)} µs per guarded call (rounds ${rounds.map((x) => x.toFixed(3)).join(", ")})`,
);

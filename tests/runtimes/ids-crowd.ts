/**
 * Run by tests/runtimes/ids.test.ts under each runtime (`bun` or `deno run`): the app's deps as the
 * runtime's entry builds them (production Upstash client, the isolate's `ids` field), a cold
 * isolate meeting CROWD concurrent callers, then a second cold isolate of the same frozen
 * millisecond drawing the next blocks. Prints one JSON line: what the test checks.
 */
import { createDeps } from "../../src/deps.ts";
import { parseEnv } from "../../src/env.ts";
import { IdGenerator } from "../../src/redis/ids.ts";
import { runtimes } from "../../src/runtime.ts";

const env =
  (globalThis as { Deno?: { env: { toObject(): Record<string, string> } } }).Deno?.env.toObject() ??
  (process.env as Record<string, string>);
const runtime = "Deno" in globalThis ? runtimes.deno : runtimes.bun;
const crowd = Number(env.CROWD ?? "10000");
// One frozen millisecond: consecutive draws get consecutive block numbers (lua/id-block.lua).
const frozen = Date.now();
const cold = () =>
  createDeps(parseEnv({ ...env, LOG_LEVEL: "silent", RUN_CRON: "false" }), { runtime, clock: { now: () => frozen } });

const a = cold();
const mine = await Promise.all(Array.from({ length: crowd }, () => a.isolate.ids.next(a)));
const b = cold();
const theirs = await Promise.all(Array.from({ length: crowd }, () => b.isolate.ids.next(b)));
const blocks = (ids: bigint[]) => new Set(ids.map((id) => IdGenerator.blockOf(id))).size;
console.log(
  JSON.stringify({
    runtime: runtime.name,
    sharesIo: runtime.sharesIo,
    ids: mine.length + theirs.length,
    distinct: new Set([...mine, ...theirs]).size,
    blocks: [blocks(mine), blocks(theirs)],
    draws: [a.isolate.ids.stats.draws, b.isolate.ids.stats.draws],
  }),
);

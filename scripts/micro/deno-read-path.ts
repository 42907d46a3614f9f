/**
 * The L1-hit read path on Deno, in-process (no sockets): µs per `app.fetch` of GET /api/shop/{id}
 * with the app built for Deno (runtime.headersByCopy false). Needs the dev stack (`npm run stack`)
 * and its demo shops:
 *   node_modules/.bin/deno run -A scripts/micro/deno-read-path.ts [ops per round]
 * Measured here: ~7.6 µs per hit in-process, against 20.7 µs of machine CPU per request under wrk
 * (bench row deno-shop-l1): the rest is Deno's HTTP layer (see scripts/micro/deno-contract-headers.ts).
 */
import { createApp } from "../../src/app.ts";
import { createDeps } from "../../src/deps.ts";
import { parseEnv } from "../../src/env.ts";
import { runtimes } from "../../src/runtime.ts";
declare const Deno: { args: string[]; readTextFileSync(path: string): string; exit(code: number): never };

const text = Deno.readTextFileSync(".local/stack.env");
const env: Record<string, string> = {};
for (const line of text.split("\n")) {
  const m = /^([A-Z0-9_]+)=(.*)$/.exec(line);
  if (m) env[m[1]!] = m[2]!.replace(/^"|"$/g, "");
}
const deps = createDeps(parseEnv({ ...env, LOG_LEVEL: "warn", RUN_CRON: "false", LISTING_IP_LIMIT: "0" }), {
  runtime: runtimes.deno,
});
const app = createApp(deps);
const pending: Promise<unknown>[] = [];
const ctx = {
  waitUntil: (p: Promise<unknown>) => void pending.push(p.catch(() => {})),
  passThroughOnException() {},
  props: {},
};
const cenv = { clientIp: "10.1.2.3" };
const headers = { "user-agent": "wrk", accept: "*/*" };
const first = await app.fetch(new Request("http://localhost/api/shop/1", { headers }), cenv, ctx);
console.log(first.status, (await first.text()).slice(0, 60));
const N = Number(Deno.args[0] ?? 200000);
for (const round of [0, 1, 2]) {
  const t0 = performance.now();
  for (let i = 0; i < N; i++) {
    const res = await app.fetch(new Request(`http://localhost/api/shop/${1 + (i % 50)}`, { headers }), cenv, ctx);
    await res.arrayBuffer();
    if (pending.length > 1000) await Promise.all(pending.splice(0));
  }
  console.log(`round ${round}: ${(((performance.now() - t0) * 1000) / N).toFixed(2)} µs/op`);
}
Deno.exit(0);

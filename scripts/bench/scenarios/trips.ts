/**
 * Set "trips": each hot operation (tests/support/trip-operations.ts, the ones the trip-budget test
 * holds) and the buyer's journey, sent N times one after another with fresh users and ids, on Bun
 * and on workerd, with every dependency RTT 0, 40 or 200 ms away (fixtures/trips-stack.ts). Not a
 * throughput test: one group per runtime and RTT, one row per operation.
 *
 * Columns: p50/p99 in ms (client side, the journey = the sum of its steps) and ÷ RTT; "seq trips"
 * = median sequential trips on the critical path from `Server-Timing` ("K in sequence"; the
 * journey sums its steps; NaN when the app sends no Server-Timing); Redis commands and DB queries
 * per request in the foreground (Server-Timing) and in the background (what the app's own
 * stand-ins served from just before the request until they were quiet, minus the foreground:
 * waitUntil work, the writer's drains QStash delivers back), and both together ("all"), medians.
 * N: BENCH_TRIPS_N (default 10), BENCH_TRIPS_N_FAR at RTT 200 (default 6).
 */
import {
  BUYERS_JOURNEY,
  type Answer,
  type Caller,
  OPERATIONS,
  type Operation,
  tripsOf,
} from "../../../tests/support/trip-operations.ts";
import { type Counts, type TripsApp, tripsApp, tripsStack, type TripsRuntime } from "../fixtures/trips-stack.ts";
import { median } from "../lib/util.ts";
import { defineScenario, type Measurement, type Scenario } from "../types.ts";

const RTTS = [0, 40, 200] as const;
const RUNTIMES: TripsRuntime[] = ["bun", "workerd"];
const N_NEAR = Number(process.env.BENCH_TRIPS_N ?? 10);
const N_FAR = Number(process.env.BENCH_TRIPS_N_FAR ?? 6);

const ROWS: Array<[string, Operation]> = [...Object.entries(OPERATIONS), ["buyer's journey", BUYERS_JOURNEY]];

const slug = (s: string) =>
  s
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-|-$/g, "");

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits until the app's dependency counters have not moved for `quietMs` (at most 20 s). */
async function quiet(app: TripsApp, quietMs: number): Promise<Counts> {
  const deadline = Date.now() + 20_000;
  let last = JSON.stringify(app.counts());
  let since = Date.now();
  while (Date.now() < deadline) {
    await sleep(20);
    const now = JSON.stringify(app.counts());
    if (now !== last) {
      last = now;
      since = Date.now();
    } else if (Date.now() - since >= quietMs) break;
  }
  return app.counts();
}

interface Sample {
  ms: number;
  seq: number;
  redisFg: number;
  dbFg: number;
  redisAll: number;
  dbAll: number;
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? Number.NaN;
}

function scenario(runtime: TripsRuntime, rtt: number, name: string, op: Operation): Scenario {
  const journey = op === BUYERS_JOURNEY;
  return defineScenario({
    name: `trips-${runtime}-${rtt}-${slug(name)}`,
    group: `trips-${runtime}-rtt${rtt}`,
    set: "trips",
    baseline: name === "L1 shop read",
    description: `${name} on ${runtime}, dependencies RTT ${rtt} ms, sequential requests with fresh data`,
    async setup(ctx) {
      const { setup } = await tripsStack(ctx);
      const app = await tripsApp(ctx, runtime);
      const quietMs = Math.max(150, 2 * rtt + 100);
      let firstErr = "";
      return {
        kind: "run",
        async run(opts): Promise<Measurement> {
          app.setDistance(rtt / 2);
          const n = opts.warmup ? 1 : rtt >= 200 ? N_FAR : N_NEAR;
          const samples: Sample[] = [];
          let errors = 0;
          const t0 = performance.now();
          for (let i = 0; i < n; i++) {
            // Counters just before the measured request (the first step of the journey).
            let before: Counts | null = null;
            let calls = 0;
            const call: Caller = async (method, path, o = {}) => {
              if (calls++ > 0 && !journey) await quiet(app, quietMs);
              if (!journey || before === null) before = app.counts();
              const headers: Record<string, string> = {};
              if (o.token) headers.authorization = o.token;
              if (o.ip) headers["cf-connecting-ip"] = o.ip;
              let body: string | undefined;
              if (o.json !== undefined) {
                headers["content-type"] = "application/json";
                body = JSON.stringify(o.json);
              }
              const start = performance.now();
              const res = await fetch(`${app.url}${path}`, {
                method,
                headers,
                body,
                signal: AbortSignal.timeout(60_000),
              });
              const text = await res.text();
              const ms = performance.now() - start;
              let parsed: Answer["body"];
              try {
                parsed = JSON.parse(text) as Answer["body"];
              } catch {
                throw new Error(`${method} ${path} → ${res.status}, not JSON: ${text.slice(0, 200)}`);
              }
              return { status: res.status, headers: res.headers, body: parsed, ms };
            };
            try {
              const out = await op.run({ setup, call, settle: async () => void (await setup.settle()) });
              const answers = Array.isArray(out) ? out : [out];
              const last = answers[answers.length - 1]!;
              if (!(op.ok ? op.ok(last.body) : last.body.success))
                throw new Error(`unexpected answer ${last.status} ${JSON.stringify(last.body).slice(0, 200)}`);
              await setup.settle();
              const after = await quiet(app, quietMs);
              const b = before as Counts | null;
              if (b === null) throw new Error("no measured request");
              const trips = answers.map((a) => tripsOf(a.headers));
              const sum = (f: (t: NonNullable<(typeof trips)[number]>) => number) =>
                trips.every((t) => t !== null) ? trips.reduce((s, t) => s + f(t!), 0) : Number.NaN;
              samples.push({
                ms: answers.reduce((s, a) => s + (a.ms ?? 0), 0),
                seq: sum((t) => t.sequential),
                redisFg: sum((t) => t.redisCommands),
                dbFg: sum((t) => t.dbTrips),
                redisAll: after.redisCommands - b.redisCommands,
                dbAll: after.dbRequests - b.dbRequests,
              });
            } catch (e) {
              errors++;
              if (!firstErr) {
                firstErr = e instanceof Error ? e.message : String(e);
                ctx.log(`trips ${runtime} rtt ${rtt} ${name}: ${firstErr}`);
              }
              await setup.settle();
              await quiet(app, quietMs);
            }
          }
          const durationS = (performance.now() - t0) / 1000;
          const col = (f: (s: Sample) => number) => median(samples.map(f));
          const ms = samples.map((s) => s.ms);
          const p50 = pct(ms, 50);
          const p99 = pct(ms, 99);
          const redisFg = col((s) => s.redisFg);
          const dbFg = col((s) => s.dbFg);
          const redisAll = col((s) => s.redisAll);
          const dbAll = col((s) => s.dbAll);
          return {
            requests: n,
            errors,
            durationS,
            rps: samples.length / durationS,
            p50Ms: p50,
            p99Ms: p99,
            extras: {
              "p50 ÷ RTT": rtt > 0 ? p50 / rtt : Number.NaN,
              "p99 ÷ RTT": rtt > 0 ? p99 / rtt : Number.NaN,
              "seq trips": col((s) => s.seq),
              "redis cmds fg": redisFg,
              "redis cmds bg": redisAll - redisFg,
              "redis cmds all": redisAll,
              "db fg": dbFg,
              "db bg": dbAll - dbFg,
              "db all": dbAll,
              n: samples.length,
            },
          };
        },
        teardown: async () => {},
      };
    },
  });
}

export default RUNTIMES.flatMap((rt) => RTTS.flatMap((rtt) => ROWS.map(([name, op]) => scenario(rt, rtt, name, op))));

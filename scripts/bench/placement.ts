/**
 * Placement from measured trips: reads a "trips" run's latest.json (scenarios/trips.ts) and prints,
 * per operation, the latency of the Worker near the user against the Worker near the data:
 *
 *   edge (default placement)   client → edge RTT C_NEAR, edge → data RTT D_FAR
 *   near the data (smart)      client → Worker RTT C_FAR, Worker → data RTT D_NEAR
 *   latency ≈ client RTT + sequential trips × data RTT   (a journey of k requests: k × client RTT)
 *
 * Trips = the median "seq trips" of the rows at one RTT (Server-Timing; the same at every RTT).
 *   bun scripts/bench/placement.ts bench-results/trips-at-a-distance/latest.json [workerd|bun] [200|40|0]
 */
import { readFileSync } from "node:fs";

const C_NEAR = 10;
const C_FAR = 200;
const D_NEAR = 10;
const D_FAR = 200;
const JOURNEY_REQUESTS = 8;

interface Row {
  name: string;
  extras: Record<string, number | null>;
}

const [file = "bench-results/trips-at-a-distance/latest.json", runtime = "workerd", rtt = "200"] =
  process.argv.slice(2);
const prefix = `trips-${runtime}-${rtt}-`;
const rows = (JSON.parse(readFileSync(file, "utf8")) as { results: Row[] }).results.filter((r) =>
  r.name.startsWith(prefix),
);
const out = [`| operation (${runtime}) | trips | edge ms | near data ms | wins |`, "|---|--:|--:|--:|---|"];
for (const r of rows) {
  const trips = r.extras["seq trips"] ?? Number.NaN;
  const requests = r.name.endsWith("buyer-s-journey") ? JOURNEY_REQUESTS : 1;
  const edge = requests * C_NEAR + trips * D_FAR;
  const near = requests * C_FAR + trips * D_NEAR;
  const wins = edge < near ? "edge" : edge > near ? "near data" : "tie";
  out.push(`| ${r.name.replace(prefix, "")} | ${trips} | ${edge} | ${near} | ${wins} |`);
}
console.log(out.join("\n"));

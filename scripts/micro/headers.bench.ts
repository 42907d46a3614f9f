/**
 * Building a response from the fast lane's 16-header template plus one, two ways
 * (src/http/headers.ts): copy a Headers then construct the Response, or construct the Response and
 * set each header. Runs as is on Bun and Deno:
 *   bun scripts/micro/headers.bench.ts
 *   node_modules/.bin/deno run -A scripts/micro/headers.bench.ts
 * (workerd: the same two functions in a Worker; its clock only moves on I/O outside dev mode.)
 */
import { HeaderTemplate, respondWith } from "../../src/http/headers.ts";
import { runtimes } from "../../src/runtime.ts";

const h = new Headers({ "content-type": "application/json" });
for (let i = 0; i < 15; i++) h.set(`x-header-number-${i}`, `value-${i}-abcdefghijkl`);
const template = new HeaderTemplate(h);

function bench(name: string, fn: () => unknown): void {
  for (let i = 0; i < 20_000; i++) fn();
  const n = 200_000;
  const t0 = performance.now();
  for (let i = 0; i < n; i++) fn();
  console.log(`${name.padEnd(34)} ${(((performance.now() - t0) * 1000) / n).toFixed(2)} µs`);
}

const extra = (headers: Headers) => headers.set("x-request-id", "0123456789");
bench("copy a Headers, then Response", () =>
  respondWith({ ...runtimes.bun, headersByCopy: true }, template, "{}", 200, extra),
);
bench("Response, then set each", () =>
  respondWith({ ...runtimes.bun, headersByCopy: false }, template, "{}", 200, extra),
);

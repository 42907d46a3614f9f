/**
 * Read-path micro-benchmark (in-process, no sockets): CPU µs per `app.fetch` of an L1-hit
 * `GET /api/shop/{id}` against a Hono hello-world, variants interleaved, median of rounds.
 *
 *   bun test ./scripts/micro/read-path.bench.ts            (uses the test stack from the preload)
 *   MICRO_ROUNDS=9 MICRO_OPS=20000 bun test ./scripts/micro/read-path.bench.ts
 */
import { test } from "bun:test";
import { type ExecutionContext, Hono } from "hono";
import { createApp } from "../../src/app.ts";
import { createLegacyApp, STEPS, type Step } from "./legacy-app.ts";
import { createShopType, HANGZHOU } from "../../tests/support/fixtures.ts";
import { insertShop } from "../../src/services/shops.ts";
import { createTestApp } from "../../tests/support/stack.ts";

const ROUNDS = Number(process.env.MICRO_ROUNDS ?? 7);
const OPS = Number(process.env.MICRO_OPS ?? 10_000);
const ONLY = process.env.MICRO_ONLY?.split(",");

type Fetcher = (req: Request, env: unknown, ctx: ExecutionContext) => Response | Promise<Response>;

async function run(
  fetch: Fetcher,
  url: string,
  headers: Record<string, string>,
  env: unknown,
  ctx: ExecutionContext,
  n: number,
): Promise<number> {
  const t0 = process.cpuUsage();
  for (let i = 0; i < n; i++) {
    const res = await fetch(new Request(url, { headers }), env, ctx);
    await res.arrayBuffer();
  }
  const d = process.cpuUsage(t0);
  return (d.user + d.system) / n;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

test("read path: L1 hit vs hello-world", async () => {
  const t = await createTestApp();
  const id = await insertShop(t.deps, {
    name: "micro-bench shop",
    typeId: await createShopType(t),
    images: "/imgs/a.jpg,/imgs/b.jpg",
    area: "拱宸桥",
    address: "test road 1",
    x: HANGZHOU.x,
    y: HANGZHOU.y,
    avgPrice: 80,
    openHours: "10:00-22:00",
  });
  const pending: Promise<unknown>[] = [];
  const ctx: ExecutionContext = {
    waitUntil: (p: Promise<unknown>) => void pending.push(p.catch(() => {})),
    passThroughOnException() {},
    props: {},
  };
  const env = { clientIp: "10.1.2.3" };
  const headers = {
    origin: "https://front.example",
    "user-agent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36",
    accept: "application/json",
  };
  const etag = (await createApp(t.deps).request(`/api/shop/${id}`)).headers.get("etag") ?? "";
  const hello = new Hono();
  hello.get("/", (c) => c.text("Hello, World!"));

  const variants: [string, Fetcher, string, Record<string, string>][] = [
    ["hello-world", hello.fetch, "http://localhost/", headers],
    ["legacy (all steps)", createLegacyApp(t.deps).fetch, `http://localhost/api/shop/${id}`, headers],
    ...STEPS.map((s): [string, Fetcher, string, Record<string, string>] => [
      `legacy − ${s}`,
      createLegacyApp(t.deps, new Set<Step>([s])).fetch,
      `http://localhost/api/shop/${id}`,
      headers,
    ]),
    [
      "legacy − all steps",
      createLegacyApp(t.deps, new Set<Step>(STEPS)).fetch,
      `http://localhost/api/shop/${id}`,
      headers,
    ],
    ["app (current src)", createApp(t.deps).fetch, `http://localhost/api/shop/${id}`, headers],
    // A query string sends the same L1 hit past the fast lane (http/fast-lane.ts): the routed path.
    ["app, routed (L1 hit)", createApp(t.deps).fetch, `http://localhost/api/shop/${id}?routed=1`, headers],
    [
      "app, If-None-Match → 304",
      createApp(t.deps).fetch,
      `http://localhost/api/shop/${id}`,
      { ...headers, "if-none-match": etag },
    ],
  ];
  const chosen = variants.filter(([name]) => !ONLY || ONLY.some((o) => name.includes(o)));
  // Warm every variant (JIT, L1, UV seen set) before measuring.
  for (const [, f, url, h] of chosen) await run(f, url, h, env, ctx, 2000);
  const samples = new Map<string, number[]>(chosen.map(([name]) => [name, []]));
  for (let r = 0; r < ROUNDS; r++) {
    // Rotate the order each round so drift (the other bench, GC) spreads across variants.
    for (let k = 0; k < chosen.length; k++) {
      const [name, f, url, h] = chosen[(k + r) % chosen.length] as (typeof chosen)[number];
      samples.get(name)?.push(await run(f, url, h, env, ctx, OPS));
    }
    await Promise.all(pending.splice(0));
  }
  const base = median(samples.get("hello-world") ?? [1]);
  const legacy = median(samples.get("legacy (all steps)") ?? [1]);
  console.log(
    `\n${"variant".padEnd(28)} ${"µs/op".padStart(8)} ${"Δ vs legacy".padStart(12)} ${"hello/this".padStart(11)}`,
  );
  for (const [name, xs] of samples) {
    const m = median(xs);
    console.log(
      `${name.padEnd(28)} ${m.toFixed(2).padStart(8)} ${(m - legacy).toFixed(2).padStart(12)} ${(base / m).toFixed(2).padStart(11)}`,
    );
  }
}, 600_000);

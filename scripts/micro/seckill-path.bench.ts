/**
 * Seckill request-path micro-benchmark (in-process app.fetch, the test stack's Redis behind the
 * Upstash-REST stand-in in the same process): CPU µs per request, and concurrency-1 latency, of
 *   - GET /api/user/me with a warm session (the auth path alone),
 *   - POST /api/voucher-order/seckill/{id} while stock lasts (one EVALSHA per request),
 *   - the same after the sell-out (answered from the isolate),
 *   - raw reserve-stock EVALSHA through the same client (the Redis path's own cost),
 * against a Hono hello-world. Concurrency C (default 64) callers per variant, like a loaded server.
 *
 *   bun test ./scripts/micro/seckill-path.bench.ts
 *   MICRO_ROUNDS=5 MICRO_OPS=5000 MICRO_CONC=64 bun test ./scripts/micro/seckill-path.bench.ts
 */
import { test } from "bun:test";
import { type ExecutionContext, Hono } from "hono";
import { createApp } from "../../src/app.ts";
import { scriptsFor } from "../../src/redis/scripts.ts";
import { loadSeckillConfig } from "../../src/services/seckill/config.ts";
import { reserveArgs, reserveKeys } from "../../src/services/seckill/reserve.ts";
import { serviceDay } from "../../src/util/time.ts";
import { createSeckill, sessionsFor, userIds } from "../../tests/support/seckill.ts";
import { createTestApp } from "../../tests/support/stack.ts";

const ROUNDS = Number(process.env.MICRO_ROUNDS ?? 5);
const OPS = Number(process.env.MICRO_OPS ?? 4000);
const CONC = Number(process.env.MICRO_CONC ?? 64);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

async function measure(op: (i: number) => Promise<unknown>, n: number): Promise<number> {
  let next = 0;
  const t0 = process.cpuUsage();
  await Promise.all(
    Array.from({ length: CONC }, async () => {
      for (;;) {
        const i = next++;
        if (i >= n) return;
        await op(i);
      }
    }),
  );
  const d = process.cpuUsage(t0);
  return (d.user + d.system) / n;
}

test("seckill path: CPU per request", async () => {
  const t = await createTestApp({
    SECKILL_USER_LIMIT: "0",
    SECKILL_IP_LIMIT: "0",
    SOLD_OUT_MEMO_MS: "1000",
    LOG_LEVEL: "silent",
  });
  const app = createApp(t.deps);
  const pending: Promise<unknown>[] = [];
  const ctx: ExecutionContext = {
    waitUntil: (p: Promise<unknown>) => void pending.push(p.catch(() => {})),
    passThroughOnException() {},
    props: {},
  };
  const env = { clientIp: "10.1.2.3" };
  const users = userIds(20_000);
  const tokens = await sessionsFor(t, users);
  const hello = new Hono();
  hello.get("/", (c) => c.text("Hello, World!"));
  const fetchApp = async (req: Request) => {
    const res = await app.fetch(req, env, ctx);
    await res.arrayBuffer();
    return res;
  };
  // Warm sessions in this isolate.
  for (const tok of tokens.slice(0, 2000))
    await fetchApp(new Request("http://localhost/api/user/me", { headers: { authorization: tok } }));
  await Promise.all(pending.splice(0));

  let round = 0;
  const fresh = async (stock: number) => {
    const { voucherId } = await createSeckill(t, { stock });
    return voucherId;
  };
  const samples = new Map<string, number[]>();
  const add = (k: string, v: number) => {
    if (!samples.has(k)) samples.set(k, []);
    samples.get(k)?.push(v);
  };
  for (let r = 0; r < ROUNDS + 1; r++) {
    const warm = r === 0;
    const n = warm ? 500 : OPS;
    add(
      "hello-world",
      await measure(async () => (await hello.fetch(new Request("http://localhost/"))).arrayBuffer(), n),
    );
    add(
      "GET /api/user/me (warm)",
      await measure(
        (i) =>
          fetchApp(
            new Request("http://localhost/api/user/me", { headers: { authorization: tokens[i % 2000] as string } }),
          ),
        n,
      ),
    );
    const onSale = await fresh(n + 10);
    const base = (round++ * OPS) % 10_000;
    add(
      "seckill on sale",
      await measure(
        (i) =>
          fetchApp(
            new Request(`http://localhost/api/voucher-order/seckill/${onSale}`, {
              method: "POST",
              headers: { authorization: tokens[(base + i) % tokens.length] as string },
            }),
          ),
        n,
      ),
    );
    const soldOut = await fresh(1);
    await fetchApp(
      new Request(`http://localhost/api/voucher-order/seckill/${soldOut}`, {
        method: "POST",
        headers: { authorization: tokens[0] as string },
      }),
    );
    add(
      "seckill sold out",
      await measure(
        (i) =>
          fetchApp(
            new Request(`http://localhost/api/voucher-order/seckill/${soldOut}`, {
              method: "POST",
              headers: { authorization: tokens[(i % 1999) + 1] as string },
            }),
          ),
        n,
      ),
    );
    const rawCfg = await loadSeckillConfig(t.deps, await fresh(n + 10));
    if (!rawCfg) throw new Error("no cfg");
    const script = scriptsFor(t.deps.redis).reserveStock;
    const day = serviceDay(Date.now(), t.deps.config.SERVICE_TIME_ZONE);
    add(
      "raw reserve EVALSHA",
      await measure(async (i) => {
        const userId = users[i % users.length] as number;
        const r = {
          orderId: String(9_000_000_000_000_000n + BigInt(round * 100_000 + i)),
          userId,
          voucherId: rawCfg.voucherId,
          shopId: rawCfg.shopId,
          reservedAt: Date.now(),
          amount: 1,
        };
        return await script.exec(
          reserveKeys(rawCfg, userId, "10.1.2.3", day, r.orderId),
          reserveArgs(t.deps.config, r),
        );
      }, n),
    );
    await Promise.all(pending.splice(0));
    if (warm) samples.clear();
  }
  const hw = median(samples.get("hello-world") ?? [1]);
  console.log(`\n${"variant".padEnd(28)} ${"µs/op".padStart(8)} ${"hello/this".padStart(11)}`);
  for (const [name, xs] of samples)
    console.log(`${name.padEnd(28)} ${median(xs).toFixed(2).padStart(8)} ${(hw / median(xs)).toFixed(2).padStart(11)}`);
}, 600_000);

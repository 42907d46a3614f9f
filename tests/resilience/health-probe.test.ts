/**
 * Anonymous /health shares one probe per isolate (services/health.ts memoPublicHealth): while the
 * MySQL probe is held by a delaying fault proxy (scripts/stack/fault-proxy.ts) in front of the
 * PlanetScale stand-in, a burst of anonymous callers adds no probe — they join it where requests
 * may share I/O (Bun), and on a runtime declared as workerd's they get the last answer at once
 * (or `unknown`, 503, during the isolate's first probe). Probes are counted at the proxy.
 */
import { afterEach, describe, expect, test } from "bun:test";
import { type FaultProxy, startFaultProxy } from "../../scripts/stack/fault-proxy.ts";
import { type Runtime, runtimes } from "../../src/runtime.ts";
import { createTestApp, eventually, getStack, type TestApp } from "../support/stack.ts";

/** How long the proxy holds the probe's query: far longer than dispatching the burst takes. */
const HOLD_MS = 3_000;
const BURST = 20;

const proxies: FaultProxy[] = [];
afterEach(async () => {
  for (const p of proxies.splice(0)) await p.stop();
});

async function appBehindProxy(runtime: Runtime): Promise<{ t: TestApp; proxy: FaultProxy; clock: { ms: number } }> {
  const stack = await getStack();
  const proxy = startFaultProxy(stack.env.DATABASE_URL as string);
  proxies.push(proxy);
  const clock = { ms: Date.now(), now: () => clock.ms };
  const t = await createTestApp({ DATABASE_URL: proxy.url }, { clock, runtime });
  return { t, proxy, clock };
}

const anonymous = async (t: TestApp) => {
  const res = await t.app.request("/health");
  return { status: res.status, retryAfter: res.headers.get("retry-after"), body: await res.json() };
};

/** Starts one anonymous /health and waits until its MySQL probe is held at the proxy. */
async function probeHeld(t: TestApp, proxy: FaultProxy) {
  const before = proxy.seen;
  proxy.set({ kind: "delay", ms: HOLD_MS, match: "SELECT 1" });
  const first = anonymous(t);
  await eventually("the probe's query reached the proxy", async () => proxy.seen === before + 1);
  return { first, before };
}

describe("anonymous /health: one probe in flight per isolate", () => {
  test("where requests share I/O (Bun), a burst arriving while the probe is held joins it: one query at the proxy", async () => {
    const { t, proxy } = await appBehindProxy(runtimes.bun);
    const { first, before } = await probeHeld(t, proxy);
    const forwarded = proxy.forwarded;
    const burst = Array.from({ length: BURST - 1 }, () => anonymous(t));
    // Dispatched while the query is still held (not yet forwarded to the stand-in).
    expect(proxy.forwarded).toBe(forwarded);
    const all = await Promise.all([first, ...burst]);
    for (const r of all)
      expect(r).toEqual({
        status: 200,
        retryAfter: null,
        body: { success: true, data: { ok: true, redis: "up", mysql: "up" } },
      });
    expect(proxy.seen - before).toBe(1);
  }, 30_000);

  test("on workerd's rules, callers while a probe runs get the last answer at once, without a second probe", async () => {
    const { t, proxy, clock } = await appBehindProxy(runtimes.workerd);
    expect((await anonymous(t)).status).toBe(200);
    clock.ms += 1_000; // the memo is due: the next caller probes
    const { first, before } = await probeHeld(t, proxy);
    const burst = await Promise.all(Array.from({ length: BURST - 1 }, () => anonymous(t)));
    // All answered while the query was still held: none waited for it, none sent its own.
    expect(proxy.forwarded).toBe(before);
    for (const r of burst)
      expect(r).toEqual({
        status: 200,
        retryAfter: null,
        body: { success: true, data: { ok: true, redis: "up", mysql: "up" } },
      });
    expect((await first).status).toBe(200);
    expect(proxy.seen - before).toBe(1);
  }, 30_000);

  test("on workerd's rules, during the isolate's first probe other callers get `unknown` (503, Retry-After 1), not a probe of their own", async () => {
    const { t, proxy } = await appBehindProxy(runtimes.workerd);
    const { first, before } = await probeHeld(t, proxy);
    const burst = await Promise.all(Array.from({ length: BURST - 1 }, () => anonymous(t)));
    expect(proxy.forwarded).toBe(before);
    for (const r of burst)
      expect(r).toEqual({
        status: 503,
        retryAfter: "1",
        body: { success: false, data: { ok: false, redis: "unknown", mysql: "unknown" } },
      });
    expect((await first).status).toBe(200);
    expect(proxy.seen - before).toBe(1);
    // The first answer is now the memo.
    expect((await anonymous(t)).status).toBe(200);
    expect(proxy.seen - before).toBe(1);
  }, 30_000);
});

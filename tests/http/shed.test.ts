/**
 * Load shedding at the door (src/http/shed.ts): past SHED_MAX_IN_FLIGHT requests, or with the event
 * loop lagging past SHED_MAX_LAG_MS, a request is refused with 503 + Retry-After before routing,
 * before its body is read and before any I/O; the admitted ones are served, and the isolate admits
 * again once it has room.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type FaultProxy, startFaultProxy } from "../../scripts/stack/fault-proxy.ts";
import { createTestApp, eventually, getStack } from "../support/stack.ts";

/** A request body that records whether anyone read it. */
function watchedBody(): { body: ReadableStream<Uint8Array>; pulled: () => boolean } {
  let pulled = false;
  const body = new ReadableStream<Uint8Array>(
    {
      pull(ctrl) {
        pulled = true;
        ctrl.enqueue(new TextEncoder().encode('{"name":"x"}'));
        ctrl.close();
      },
    },
    { highWaterMark: 0 },
  );
  return { body, pulled: () => pulled };
}

describe("load shedding", () => {
  let proxy: FaultProxy;
  beforeAll(async () => {
    proxy = startFaultProxy((await getStack()).env.UPSTASH_REDIS_REST_URL as string);
  }, 60_000);
  afterAll(async () => {
    await proxy.stop();
  });

  test("past SHED_MAX_IN_FLIGHT the surplus is refused at once (503, Retry-After, envelope) without reading its body or calling Redis; the admitted requests are served and the isolate admits again", async () => {
    proxy.set({ kind: "pass" });
    const t = await createTestApp({ UPSTASH_REDIS_REST_URL: proxy.url, SHED_MAX_IN_FLIGHT: "4" });
    const shed = t.deps.isolate.shed;
    // Four reads of a cold L1 wait on a slow Redis: the isolate is full.
    proxy.set({ kind: "delay", ms: 1_500 });
    const slow = Array.from({ length: 4 }, () => t.app.request("/api/shop-type/list"));
    await eventually("four requests in flight", async () => shed.inFlight === 4, 5_000, 5);
    const seen = proxy.seen;

    const watched = watchedBody();
    const refused = await t.app.request("/api/blog", {
      method: "POST",
      headers: { "content-type": "application/json", authorization: "whatever" },
      body: watched.body,
      duplex: "half",
    } as RequestInit);
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(refused.headers.get("x-request-id")).toBeTruthy();
    expect(await refused.json()).toMatchObject({ success: false, code: "UNAVAILABLE" });
    expect(watched.pulled()).toBe(false);
    expect(proxy.seen).toBe(seen);
    expect(shed.shed.inFlight).toBe(1);

    const served = await Promise.all(slow);
    expect(served.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    expect(shed.inFlight).toBe(0);
    proxy.set({ kind: "pass" });
    expect((await t.app.request("/api/shop-type/list")).status).toBe(200);
  }, 20_000);

  test("an event loop lagging past SHED_MAX_LAG_MS refuses new requests; once it has caught up they are admitted again", async () => {
    proxy.set({ kind: "pass" });
    const t = await createTestApp({ SHED_MAX_LAG_MS: "50" });
    const shed = t.deps.isolate.shed;
    // A request starts the lag probe (admission is synchronous); then this isolate burns its CPU
    // for 400 ms before the probe's timer can run.
    const first = t.app.request("/health");
    const end = performance.now() + 400;
    while (performance.now() < end) {
      /* busy: a CPU-heavy request */
    }
    expect((await first).status).toBeLessThan(500);
    await eventually("the lag probe to report", async () => shed.lagMs > 50, 5_000, 1);
    const refused = await t.app.request("/api/shop-type/list");
    expect(refused.status).toBe(503);
    expect(shed.shed.lag).toBeGreaterThanOrEqual(1);
    // Quiet again: the probes read no lag and the smoothed value decays below the bound.
    await eventually(
      "requests to be admitted again",
      async () => (await t.app.request("/api/shop-type/list")).status === 200,
      10_000,
      60,
    );
  }, 20_000);
});

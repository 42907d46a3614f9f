/**
 * Slow is not down, busy is not broken (src/resilience.ts), with the production defaults for
 * deadlines and breakers: a far Redis is served at its distance, a caller queued behind answers to
 * other calls is given time, a hang is still caught at the adaptive deadline and opens the breaker,
 * a failing minority does not, and half-open lets a few probes through. Distance and faults come
 * from proxies in front of the Upstash-REST stand-in; the clients are the production SDK.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type FaultProxy, startFaultProxy } from "../../scripts/stack/fault-proxy.ts";
import { parseEnv } from "../../src/env.ts";
import { DependencyUnavailableError, Guard } from "../../src/resilience.ts";
import { runtimes } from "../../src/runtime.ts";
import { createTestApp, eventually, getStack } from "../support/stack.ts";

/** The deadline and breaker settings an operator gets without setting any (src/env.ts defaults). */
async function productionResilience(): Promise<Record<string, string>> {
  const d = parseEnv((await getStack()).env);
  const keys = [
    "REDIS_TIMEOUT_MS",
    "MYSQL_TIMEOUT_MS",
    "QSTASH_TIMEOUT_MS",
    "DEADLINE_FLOOR_MS",
    "DEADLINE_FACTOR",
    "BREAKER_MIN_CALLS",
    "BREAKER_FAILURE_RATIO",
    "BREAKER_WINDOW_MS",
    "BREAKER_HALF_OPEN_AFTER_MS",
    "BREAKER_HALF_OPEN_CALLS",
  ] as const;
  return Object.fromEntries(keys.map((k) => [k, String(d[k])]));
}

/**
 * A proxy that forwards one request at a time, each held `holdMs` after its answer: a dependency
 * (or a connection pool) that serves callers in turn, so a crowd queues in front of it.
 */
function startSerialProxy(target: string, holdMs: number) {
  const t = new URL(target);
  let chain: Promise<unknown> = Promise.resolve();
  let served = 0;
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch(req) {
      const turn = chain.then(async () => {
        const url = new URL(req.url);
        url.protocol = t.protocol;
        url.host = t.host;
        const headers = new Headers(req.headers);
        headers.delete("host");
        const res = await fetch(url, { method: req.method, headers, body: await req.arrayBuffer() });
        const body = await res.arrayBuffer();
        await new Promise((r) => setTimeout(r, holdMs));
        served++;
        return new Response(body, { status: res.status, headers: { "content-type": "application/json" } });
      });
      chain = turn.catch(() => {});
      return turn;
    },
  });
  const url = new URL(target);
  url.host = `127.0.0.1:${server.port}`;
  return {
    url: url.toString().replace(/\/$/, ""),
    get served() {
      return served;
    },
    stop: () => server.stop(true),
  };
}

const timed = async <T>(fn: () => Promise<T>): Promise<{ ok: boolean; ms: number; err?: unknown }> => {
  const started = performance.now();
  try {
    await fn();
    return { ok: true, ms: performance.now() - started };
  } catch (err) {
    return { ok: false, ms: performance.now() - started, err };
  }
};

describe("deadlines that know distance (production defaults)", () => {
  let proxy: FaultProxy;

  beforeAll(async () => {
    proxy = startFaultProxy((await getStack()).env.UPSTASH_REDIS_REST_URL as string);
  });
  afterAll(async () => {
    await proxy.stop();
  });

  test("300 ms away (beyond the floor): every call is answered and the deadline grows past the distance; a hang is then caught at that deadline, before the ceiling", async () => {
    proxy.set({ kind: "delay", ms: 300 });
    const t = await createTestApp({ UPSTASH_REDIS_REST_URL: proxy.url, ...(await productionResilience()) });
    const guard = t.deps.isolate.resilience.redis;
    const ceiling = t.deps.config.REDIS_TIMEOUT_MS;
    const far = [];
    for (let i = 0; i < 12; i++) far.push(await timed(() => t.deps.redis.get(`distance:far:${i}`)));
    expect(far.filter((r) => !r.ok).map((r) => String(r.err))).toEqual([]);
    const s = guard.snapshot();
    expect({ state: s.state, failures: s.failures }).toEqual({ state: "closed", failures: 0 });
    expect(s.timeoutMs).toBeGreaterThanOrEqual(300 * t.deps.config.DEADLINE_FACTOR);
    expect(s.timeoutMs).toBeLessThanOrEqual(ceiling);

    // A hang: no answer at all. The caller is let go at the adaptive deadline, not the ceiling.
    proxy.set({ kind: "delay", ms: 60_000 });
    const deadline = guard.snapshot().timeoutMs;
    const hung = await timed(() => t.deps.redis.get("distance:hung"));
    expect(hung.err).toBeInstanceOf(DependencyUnavailableError);
    expect((hung.err as DependencyUnavailableError).reason).toBe("timeout");
    expect(hung.ms).toBeGreaterThanOrEqual(deadline - 5);
    if (deadline < ceiling) expect(hung.ms).toBeLessThan(ceiling);
    expect(guard.snapshot().failures).toBe(1);
    proxy.set({ kind: "pass" });
  }, 30_000);

  test("near, the deadline settles at the floor; when the dependency moves 400 ms away, at most the first call misses, then the deadline follows it and every call is answered", async () => {
    proxy.set({ kind: "pass" });
    const t = await createTestApp({ UPSTASH_REDIS_REST_URL: proxy.url, ...(await productionResilience()) });
    const guard = t.deps.isolate.resilience.redis;
    for (let i = 0; i < 12; i++) await t.deps.redis.get(`distance:near:${i}`);
    expect(guard.snapshot().timeoutMs).toBe(t.deps.config.DEADLINE_FLOOR_MS);
    proxy.set({ kind: "delay", ms: 400 });
    const moved = [];
    for (let i = 0; i < 8; i++) moved.push(await timed(() => t.deps.redis.get(`distance:moved:${i}`)));
    expect(
      moved
        .slice(1)
        .filter((r) => !r.ok)
        .map((r) => String(r.err)),
    ).toEqual([]);
    expect(guard.snapshot()).toMatchObject({ state: "closed" });
    proxy.set({ kind: "pass" });
  }, 30_000);
});

describe("a breaker that opens on failure, not on load (production defaults)", () => {
  test("a crowd queued behind a dependency that serves one call at a time: deadlines missed while others are answered are extended, every call is answered, nothing counts against Redis", async () => {
    const stack = await getStack();
    const serial = startSerialProxy(stack.env.UPSTASH_REDIS_REST_URL as string, 15);
    try {
      // workerd's rules: each command is its own request (no auto-pipelining to merge the crowd).
      const t = await createTestApp(
        { UPSTASH_REDIS_REST_URL: serial.url, ...(await productionResilience()) },
        { runtime: runtimes.workerd },
      );
      const guard = t.deps.isolate.resilience.redis;
      // Warm: the deadline learns ~15 ms answers and settles at the floor (250 ms).
      for (let i = 0; i < 12; i++) await t.deps.redis.get(`queued:warm:${i}`);
      expect(guard.snapshot().timeoutMs).toBe(t.deps.config.DEADLINE_FLOOR_MS);
      // 60 at once: the last waits ~60 × 15 ms = 900 ms in the queue, far past the floor.
      const crowd = await Promise.all(
        Array.from({ length: 60 }, (_, i) => timed(() => t.deps.redis.get(`queued:crowd:${i}`))),
      );
      expect(crowd.filter((r) => !r.ok).map((r) => String(r.err))).toEqual([]);
      const s = guard.snapshot();
      expect({ state: s.state, failures: s.failures, opened: s.opened }).toEqual({
        state: "closed",
        failures: 0,
        opened: 0,
      });
      expect(s.extended).toBeGreaterThan(0);
    } finally {
      await serial.stop();
    }
  }, 30_000);

  test("a hang under a crowd: no call is answered, each fails at the deadline and the breaker opens; later calls are refused without a request", async () => {
    const stack = await getStack();
    const proxy = startFaultProxy(stack.env.UPSTASH_REDIS_REST_URL as string);
    try {
      const t = await createTestApp(
        { UPSTASH_REDIS_REST_URL: proxy.url, ...(await productionResilience()), BREAKER_HALF_OPEN_AFTER_MS: "60000" },
        { runtime: runtimes.workerd },
      );
      const guard = t.deps.isolate.resilience.redis;
      for (let i = 0; i < 12; i++) await t.deps.redis.get(`hang:warm:${i}`);
      proxy.set({ kind: "delay", ms: 60_000 });
      const crowd = await Promise.all(Array.from({ length: 30 }, (_, i) => timed(() => t.deps.redis.get(`hang:${i}`))));
      expect(crowd.every((r) => !r.ok)).toBe(true);
      const s = guard.snapshot();
      expect(s.state).toBe("open");
      expect(s.queued).toBe(0);
      const seen = proxy.seen;
      const refused = await timed(() => t.deps.redis.get("hang:after"));
      expect((refused.err as DependencyUnavailableError).reason).toBe("open");
      expect(proxy.seen).toBe(seen);
    } finally {
      await proxy.stop();
    }
  }, 30_000);

  test("a failing minority (2 of 20 calls answered by a gateway's 502) leaves the breaker closed; a failing majority opens it", async () => {
    const stack = await getStack();
    const proxy = startFaultProxy(stack.env.UPSTASH_REDIS_REST_URL as string);
    try {
      const t = await createTestApp(
        { UPSTASH_REDIS_REST_URL: proxy.url, ...(await productionResilience()), BREAKER_HALF_OPEN_AFTER_MS: "60000" },
        { runtime: runtimes.workerd },
      );
      const guard = t.deps.isolate.resilience.redis;
      proxy.set({ kind: "fail", match: ["minority:bad:"] });
      const calls = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          timed(() => t.deps.redis.get(i < 2 ? `minority:bad:${i}` : `minority:good:${i}`)),
        ),
      );
      expect(calls.filter((r) => !r.ok).length).toBe(2);
      expect(guard.snapshot()).toMatchObject({ state: "closed", failures: 2 });
      proxy.set({ kind: "fail" });
      for (let i = 0; i < 40 && guard.state === "closed"; i++) await timed(() => t.deps.redis.get(`majority:${i}`));
      expect(guard.state).toBe("open");
    } finally {
      await proxy.stop();
    }
  }, 30_000);

  test("half-open admits a few probes at once and refuses the rest at once; that many successes close it, one failure re-opens it", async () => {
    const guard = new Guard("redis", { timeoutMs: 5_000, minCalls: 1, halfOpenAfterMs: 100, halfOpenCalls: 3 });
    await expect(guard.run(() => Promise.reject(new Error("boom")))).rejects.toBeInstanceOf(DependencyUnavailableError);
    expect(guard.state).toBe("open");
    await eventually("the breaker to let probes through", async () => guard.state === "halfOpen", 5_000, 20);
    const gates: (() => void)[] = [];
    const probes = Array.from({ length: 3 }, () =>
      guard.run(() => new Promise<string>((resolve) => gates.push(() => resolve("ok")))),
    );
    const fourth = await timed(() => guard.run(async () => "not run"));
    expect((fourth.err as DependencyUnavailableError).reason).toBe("open");
    for (const g of gates) g();
    expect(await Promise.all(probes)).toEqual(["ok", "ok", "ok"]);
    expect(guard.state).toBe("closed");

    await expect(guard.run(() => Promise.reject(new Error("boom again")))).rejects.toBeInstanceOf(
      DependencyUnavailableError,
    );
    await eventually("the breaker to let probes through again", async () => guard.state === "halfOpen", 5_000, 20);
    await expect(guard.run(() => Promise.reject(new Error("probe fails")))).rejects.toBeInstanceOf(
      DependencyUnavailableError,
    );
    expect(guard.snapshot()).toMatchObject({ state: "open", opened: 3 });
  });
});

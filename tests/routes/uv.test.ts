import { describe, expect, test } from "bun:test";
import type { Deps } from "../../src/deps.ts";
import { keys } from "../../src/redis/keys.ts";
import { operator } from "../support/fixtures.ts";
import { call } from "../support/http.ts";
import { manualClock, newUser } from "../support/social.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";

type Report = { from: string; to: string; days: { date: string; uv: number }[]; total: number };

/** Wraps the Redis client and counts the commands it sends (direct and pipelined), by name. */
function countingRedis(counter: { n: number; pfadd: number; byName: Record<string, number> }) {
  const count = (name: string) => {
    counter.n++;
    if (name === "pfadd") counter.pfadd++;
    counter.byName[name] = (counter.byName[name] ?? 0) + 1;
  };
  const COMMANDS = new Set([
    "pfadd",
    "expire",
    "pfcount",
    "get",
    "set",
    "del",
    "hgetall",
    "hmget",
    "hset",
    "hincrby",
    "evalsha",
    "eval",
  ]);
  return (deps: Deps): Deps => ({
    ...deps,
    redis: new Proxy(deps.redis, {
      get(target, prop, receiver) {
        if (prop === "pipeline") {
          return () => {
            const p = target.pipeline();
            return new Proxy(p, {
              get(pt, pp, pr) {
                const value = Reflect.get(pt, pp, pr);
                if (typeof value !== "function") return value;
                return (...args: unknown[]) => {
                  if (typeof pp === "string" && COMMANDS.has(pp)) count(pp);
                  const out = (value as (...a: unknown[]) => unknown).apply(pt, args);
                  return out === pt ? pr : out;
                };
              },
            });
          };
        }
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          if (typeof prop === "string" && COMMANDS.has(prop)) count(prop);
          return (value as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    }),
  });
}

const newCounter = () => ({ n: 0, pfadd: 0, byName: {} as Record<string, number> });

const noonOn = (date: string) => Date.parse(`${date}T12:00:00+08:00`);

async function visit(t: TestApp, opts: { token?: string; ip?: string; ua?: string }) {
  const path = opts.token ? "/api/user/me" : "/api/shop-type/list";
  const res = await call(t.app, "GET", path, {
    token: opts.token,
    ip: opts.ip,
    headers: { "user-agent": opts.ua ?? "test-agent" },
  });
  expect(res.status).toBe(200);
}

async function report(t: TestApp, query: string) {
  return await call<Report>(t.app, "GET", `/admin/uv${query}`, { token: operator(t) });
}

describe("unique visitors", () => {
  test("each visitor counts once a day: users by id, others by address (not by user agent), gathered into one PFADD per isolate", async () => {
    // Users log in through another app, on a day outside the reported range (their logins do not
    // count below), within their tokens' absolute lifetime of the days visited.
    const login = await createTestApp({}, { clock: manualClock(noonOn("2041-06-01")) });
    const [a, b] = [await newUser(login), await newUser(login)];
    const counter = newCounter();
    const clock = manualClock(noonOn("2041-06-10"));
    const t = await createTestApp({}, { clock, wrap: countingRedis(counter) });

    for (let i = 0; i < 3; i++) await visit(t, { token: a.token, ip: `10.7.0.${i}` });
    await visit(t, { token: b.token });
    for (let i = 0; i < 3; i++) await visit(t, { ip: "10.7.1.1", ua: "ua-1" });
    await visit(t, { ip: "10.7.1.1", ua: "ua-2" }); // the same address with another agent: the same visitor
    await visit(t, { ip: "10.7.1.2", ua: "ua-1" });
    // Not an /api request: not counted.
    await t.app.request("/health");
    await t.settle();
    // Gathered, not sent: the interval has not passed on the injected clock.
    expect(counter.pfadd).toBe(0);
    expect(t.deps.isolate.uv.size).toBe(4);
    clock.ms += t.deps.isolate.uv.opts.flushEveryMs;
    await visit(t, { ip: "10.7.1.1", ua: "ua-1" }); // a known visitor: only makes the due flush start
    await t.settle();
    expect(counter.pfadd).toBe(1);
    expect(await t.deps.redis.pfcount(keys.uv("20410610"))).toBe(4);
    expect(await t.deps.redis.ttl(keys.uv("20410610"))).toBeGreaterThan(300 * 86_400);

    const day1 = await report(t, "?from=2041-06-10&to=2041-06-10");
    expect(day1.body).toEqual({
      success: true,
      data: { from: "2041-06-10", to: "2041-06-10", days: [{ date: "2041-06-10", uv: 4 }], total: 4 },
    });

    // Next day: a returning user and a new address. A second isolate repeats a PFADD harmlessly
    // (the report flushes the serving isolate; the other one is flushed explicitly).
    clock.ms = noonOn("2041-06-11");
    await visit(t, { token: a.token });
    await visit(t, { ip: "10.7.1.3" });
    const other = await createTestApp({}, { clock });
    await visit(other, { token: a.token });
    await Promise.all([t.settle(), other.settle()]);
    await other.deps.isolate.uv.flush(other.deps);
    const range = await report(t, "?from=2041-06-09&to=2041-06-11");
    expect(range.body.data).toEqual({
      from: "2041-06-09",
      to: "2041-06-11",
      days: [
        { date: "2041-06-09", uv: 0 },
        { date: "2041-06-10", uv: 4 },
        { date: "2041-06-11", uv: 2 },
      ],
      // The union: user a visited on both days and counts once.
      total: 5,
    });
  });

  test("the report defaults to today in the service time zone", async () => {
    const clock = manualClock(Date.parse("2041-07-01T17:00:00Z")); // 01:00 on July 2nd in Shanghai
    const t = await createTestApp({}, { clock });
    await visit(t, { ip: "10.8.0.1" });
    await t.settle();
    expect((await report(t, "")).body.data).toEqual({
      from: "2041-07-02",
      to: "2041-07-02",
      days: [{ date: "2041-07-02", uv: 1 }],
      total: 1,
    });
    expect((await report(t, "?from=2041-07-01")).body.data?.days.map((d) => d.date)).toEqual([
      "2041-07-01",
      "2041-07-02",
    ]);
  });

  test("the report is for operators only and rejects malformed or unbounded ranges with a 400 envelope", async () => {
    const t = await createTestApp();
    const user = await newUser(t);
    // From an address of its own: failed operator attempts are counted per address across isolates
    // (http/operator-attempts.ts), and other files' wrong tokens come from the default one.
    const ip = `10.77.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}`;
    expect((await call(t.app, "GET", "/admin/uv", { ip })).status).toBe(401);
    expect((await call(t.app, "GET", "/admin/uv", { token: user.token, ip })).status).toBe(401);
    expect((await call(t.app, "GET", "/admin/uv", { token: `Bearer ${user.token}`, ip })).status).toBe(401);
    for (const q of [
      "?from=2041-02-30",
      "?from=abc",
      "?to=2041-1-01",
      "?from=2041-03-02&to=2041-03-01",
      "?from=2040-01-01&to=2041-01-01",
      "?from=1900-01-01&to=2100-01-01",
    ]) {
      const res = await report(t, q);
      expect(res.status, q).toBe(400);
      expect(res.body).toMatchObject({ success: false, code: "INVALID_INPUT" });
    }
    // 366 days is the longest range.
    expect((await report(t, "?from=2040-01-01&to=2040-12-31")).body.data?.days.length).toBe(366);
  });
  test("N distinct visitors within an interval cost one Redis command; the day's count is right after the flush", async () => {
    const counter = newCounter();
    const clock = manualClock(noonOn("2041-08-03"));
    const t = await createTestApp({}, { clock, wrap: countingRedis(counter) });
    const day = keys.uv("20410803");
    // This isolate's first flush of the day also sets the key's retention (EXPIRE rides along once).
    await visit(t, { ip: "10.9.0.1", ua: "first" });
    clock.ms += t.deps.isolate.uv.opts.flushEveryMs;
    await visit(t, { ip: "10.9.0.1", ua: "first" });
    await t.settle();
    expect(counter.byName).toMatchObject({ pfadd: 1, expire: 1 });
    expect(await t.deps.redis.ttl(day)).toBeGreaterThan(300 * 86_400);

    const before = { ...counter, byName: { ...counter.byName } };
    const restBefore = t.stack.rest.stats();
    const N = 200;
    for (let i = 0; i < N; i++) await visit(t, { ip: `10.9.${Math.floor(i / 250) + 1}.${i % 250}`, ua: `ua-${i}` });
    await t.settle();
    expect(counter.n - before.n).toBe(0);
    clock.ms += t.deps.isolate.uv.opts.flushEveryMs;
    await visit(t, { ip: "10.9.0.1", ua: "first" });
    await t.settle();
    // One command for all N visitors, at the app's client and at the Upstash-REST stand-in.
    expect(counter.n - before.n).toBe(1);
    expect(counter.pfadd - before.pfadd).toBe(1);
    expect(t.stack.rest.stats().requests - restBefore.requests).toBeLessThanOrEqual(2); // + at most another test app's background flush
    // HyperLogLog: an estimate (standard error 0.81 %), so within a few of N + 1, not exactly it.
    expect(Math.abs((await t.deps.redis.pfcount(day)) - (N + 1))).toBeLessThanOrEqual(4);
  });

  test("a failed flush keeps its batch and retries it next interval, boundedly", async () => {
    const clock = manualClock(noonOn("2041-08-04"));
    let failing = true;
    const t = await createTestApp(
      {},
      {
        clock,
        wrap: (deps) => ({
          ...deps,
          redis: new Proxy(deps.redis, {
            get(target, prop, receiver) {
              if (failing && (prop === "pfadd" || prop === "pipeline")) {
                return () => {
                  throw new Error("redis down");
                };
              }
              const value = Reflect.get(target, prop, receiver);
              return typeof value === "function" ? value.bind(target) : value;
            },
          }),
        }),
      },
    );
    const uv = t.deps.isolate.uv;
    for (let i = 0; i < 3; i++) await visit(t, { ip: `10.10.0.${i}`, ua: "retry" });
    clock.ms += uv.opts.flushEveryMs;
    await visit(t, { ip: "10.10.0.0", ua: "retry" });
    await t.settle();
    expect(uv.size).toBe(3); // put back, not lost
    failing = false;
    clock.ms += uv.opts.flushEveryMs;
    await visit(t, { ip: "10.10.0.0", ua: "retry" });
    await t.settle();
    expect(uv.size).toBe(0);
    expect(await t.deps.redis.pfcount(keys.uv("20410804"))).toBe(3);

    // A batch that keeps failing is dropped after maxAttempts (and counted), never retried forever.
    failing = true;
    await visit(t, { ip: "10.10.1.1", ua: "doomed" });
    for (let i = 0; i < uv.opts.maxAttempts; i++) {
      clock.ms += uv.opts.flushEveryMs;
      await visit(t, { ip: "10.10.0.0", ua: "retry" });
      await t.settle();
    }
    expect(uv.size).toBe(0);
    expect(uv.dropped).toBe(1);
  });
});

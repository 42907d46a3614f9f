import { describe, expect, test } from "bun:test";
import type { Deps } from "../../src/deps.ts";
import { keys } from "../../src/redis/keys.ts";
import { operator } from "../support/fixtures.ts";
import { call } from "../support/http.ts";
import { manualClock, newUser } from "../support/social.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";

type Report = { from: string; to: string; days: { date: string; uv: number }[]; total: number };

/** Wraps the Redis client so that PFADDs sent through pipelines are counted. */
function countingPfadds(counter: { n: number }) {
  return (deps: Deps): Deps => ({
    ...deps,
    redis: new Proxy(deps.redis, {
      get(target, prop, receiver) {
        if (prop === "pipeline") {
          return () => {
            const p = target.pipeline();
            const pfadd = p.pfadd.bind(p);
            p.pfadd = ((...args: Parameters<typeof pfadd>) => {
              counter.n++;
              return pfadd(...args);
            }) as typeof p.pfadd;
            return p;
          };
        }
        const value = Reflect.get(target, prop, receiver);
        return typeof value === "function" ? value.bind(target) : value;
      },
    }),
  });
}

const noonOn = (date: string) => Date.parse(`${date}T12:00:00+08:00`);

async function visit(t: TestApp, opts: { token?: string; ip?: string; ua?: string }) {
  const path = opts.token ? "/api/user/me" : "/api/shop-type/list";
  const res = await call(t.app, "GET", path, { token: opts.token, ip: opts.ip, headers: { "user-agent": opts.ua ?? "test-agent" } });
  expect(res.status).toBe(200);
}

async function report(t: TestApp, query: string) {
  return await call<Report>(t.app, "GET", `/admin/uv${query}`, { token: operator(t) });
}

describe("unique visitors", () => {
  test("each visitor counts once a day: users by id, others by address + user agent, with one PFADD per visitor-day per isolate", async () => {
    // Users log in through another app, on the real date, so their logins do not count below.
    const login = await createTestApp();
    const [a, b] = [await newUser(login), await newUser(login)];
    const counter = { n: 0 };
    const clock = manualClock(noonOn("2041-06-10"));
    const t = await createTestApp({}, { clock, wrap: countingPfadds(counter) });

    for (let i = 0; i < 3; i++) await visit(t, { token: a.token, ip: `10.7.0.${i}` });
    await visit(t, { token: b.token });
    for (let i = 0; i < 3; i++) await visit(t, { ip: "10.7.1.1", ua: "ua-1" });
    await visit(t, { ip: "10.7.1.1", ua: "ua-2" });
    await visit(t, { ip: "10.7.1.2", ua: "ua-1" });
    // Not an /api request: not counted.
    await t.app.request("/health");
    await t.settle();
    expect(counter.n).toBe(5);
    expect(await t.deps.redis.pfcount(keys.uv("20410610"))).toBe(5);
    expect(await t.deps.redis.ttl(keys.uv("20410610"))).toBeGreaterThan(300 * 86_400);

    const day1 = await report(t, "?from=2041-06-10&to=2041-06-10");
    expect(day1.body).toEqual({ success: true, data: { from: "2041-06-10", to: "2041-06-10", days: [{ date: "2041-06-10", uv: 5 }], total: 5 } });

    // Next day: a returning user and a new address. A second isolate repeats a PFADD harmlessly.
    clock.ms = noonOn("2041-06-11");
    await visit(t, { token: a.token });
    await visit(t, { ip: "10.7.1.3" });
    const other = await createTestApp({}, { clock });
    await visit(other, { token: a.token });
    await Promise.all([t.settle(), other.settle()]);
    const range = await report(t, "?from=2041-06-09&to=2041-06-11");
    expect(range.body.data).toEqual({
      from: "2041-06-09",
      to: "2041-06-11",
      days: [
        { date: "2041-06-09", uv: 0 },
        { date: "2041-06-10", uv: 5 },
        { date: "2041-06-11", uv: 2 },
      ],
      // The union: user a visited on both days and counts once.
      total: 6,
    });
  });

  test("the report defaults to today in the service time zone", async () => {
    const clock = manualClock(Date.parse("2041-07-01T17:00:00Z")); // 01:00 on July 2nd in Shanghai
    const t = await createTestApp({}, { clock });
    await visit(t, { ip: "10.8.0.1" });
    await t.settle();
    expect((await report(t, "")).body.data).toEqual({ from: "2041-07-02", to: "2041-07-02", days: [{ date: "2041-07-02", uv: 1 }], total: 1 });
    expect((await report(t, "?from=2041-07-01")).body.data?.days.map((d) => d.date)).toEqual(["2041-07-01", "2041-07-02"]);
  });

  test("the report is for operators only and rejects malformed or unbounded ranges with a 400 envelope", async () => {
    const t = await createTestApp();
    const user = await newUser(t);
    expect((await call(t.app, "GET", "/admin/uv")).status).toBe(401);
    expect((await call(t.app, "GET", "/admin/uv", { token: user.token })).status).toBe(401);
    expect((await call(t.app, "GET", "/admin/uv", { token: `Bearer ${user.token}` })).status).toBe(401);
    for (const q of ["?from=2041-02-30", "?from=abc", "?to=2041-1-01", "?from=2041-03-02&to=2041-03-01", "?from=2040-01-01&to=2041-01-01", "?from=1900-01-01&to=2100-01-01"]) {
      const res = await report(t, q);
      expect(res.status, q).toBe(400);
      expect(res.body).toMatchObject({ success: false, code: "INVALID_INPUT" });
    }
    // 366 days is the longest range.
    expect((await report(t, "?from=2040-01-01&to=2040-12-31")).body.data?.days.length).toBe(366);
  });
});

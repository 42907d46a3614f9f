import { describe, expect, test } from "bun:test";
import { keys } from "../../src/redis/keys.ts";
import { call } from "../support/http.ts";
import { manualClock, newUser, type TestUser } from "../support/social.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";

/** Noon in Asia/Shanghai (the default SERVICE_TIME_ZONE) of a calendar day, epoch ms. */
const shanghaiNoon = (date: string) => Date.parse(`${date}T12:00:00+08:00`);

function addDays(date: string, n: number): string {
  return new Date(Date.parse(`${date}T00:00:00Z`) + n * 86_400_000).toISOString().slice(0, 10);
}

/**
 * `startMs`: the clock when the user signs in. The tests travel 2031–2032 on that clock, so the
 * token's absolute lifetime is the longest allowed (366 days) from mid-2031.
 */
async function setup(startMs = Date.parse("2031-06-01T04:00:00Z")): Promise<{
  t: TestApp;
  clock: ReturnType<typeof manualClock>;
  user: TestUser;
  signOn: (date: string) => Promise<void>;
  countOn: (date: string) => Promise<number>;
}> {
  const clock = manualClock(startMs);
  const t = await createTestApp({ SESSION_MAX_AGE_SECONDS: String(366 * 86_400) }, { clock });
  const user = await newUser(t);
  return {
    t,
    clock,
    user,
    signOn: async (date) => {
      clock.ms = shanghaiNoon(date);
      const res = await call(t.app, "POST", "/api/user/sign", { token: user.token });
      expect(res.body).toEqual({ success: true });
    },
    countOn: async (date) => {
      clock.ms = shanghaiNoon(date);
      const res = await call<number>(t.app, "GET", "/api/user/sign/count", { token: user.token });
      expect(res.body.success).toBe(true);
      return res.body.data as number;
    },
  };
}

describe("sign-in", () => {
  test("signing sets bit day−1 of sign:{uid}:{yyyyMM}, and signing twice a day is harmless", async () => {
    const { t, user, signOn } = await setup();
    await signOn("2031-03-05");
    await signOn("2031-03-05");
    const key = keys.sign(user.id, "203103");
    expect(key).toBe(`sign:${user.id}:203103`);
    expect(await t.deps.redis.getbit(key, 4)).toBe(1);
    expect(await t.deps.redis.bitcount(key, 0, -1)).toBe(1);
  });

  test("the count is the run of consecutive days ending today; a gap or an unsigned today breaks it", async () => {
    const { signOn, countOn } = await setup();
    for (const d of ["2031-05-02", "2031-05-03", "2031-05-05", "2031-05-06", "2031-05-07"]) await signOn(d);
    expect(await countOn("2031-05-07")).toBe(3);
    expect(await countOn("2031-05-03")).toBe(2);
    expect(await countOn("2031-05-04")).toBe(0);
    expect(await countOn("2031-05-08")).toBe(0);
    expect(await countOn("2031-05-01")).toBe(0);
  });

  test("a streak continues across month boundaries, through whole months, and across a year", async () => {
    const { signOn, countOn } = await setup();
    // 2031-12-30 .. 2032-03-02: every day (Jan and Feb 2032 fully; 2032 is a leap year).
    let day = "2031-12-30";
    let n = 0;
    while (day <= "2032-03-02") {
      await signOn(day);
      day = addDays(day, 1);
      n++;
    }
    expect(n).toBe(2 + 31 + 29 + 2);
    expect(await countOn("2032-03-02")).toBe(n);
    expect(await countOn("2032-03-01")).toBe(n - 1);
    expect(await countOn("2032-02-29")).toBe(n - 2);
    expect(await countOn("2032-01-01")).toBe(3);
    expect(await countOn("2031-12-31")).toBe(2);
  }, 60_000);

  test("days are calendar days in the service time zone", async () => {
    const { t, clock, user } = await setup(Date.parse("2031-03-01T12:00:00Z"));
    // 16:30 UTC on March 1st is 00:30 on March 2nd in Shanghai.
    clock.ms = Date.parse("2031-03-01T16:30:00Z");
    await call(t.app, "POST", "/api/user/sign", { token: user.token });
    expect(await t.deps.redis.getbit(keys.sign(user.id, "203103"), 1)).toBe(1);
    expect(await t.deps.redis.getbit(keys.sign(user.id, "203103"), 0)).toBe(0);
    const utc = await createTestApp(
      { SERVICE_TIME_ZONE: "UTC", SESSION_MAX_AGE_SECONDS: String(366 * 86_400) },
      { clock },
    );
    await call(utc.app, "POST", "/api/user/sign", { token: user.token });
    expect(await t.deps.redis.getbit(keys.sign(user.id, "203103"), 0)).toBe(1);
  });

  test("sign routes need a login, and /sign/count is not taken for a user id", async () => {
    const { t, user } = await setup();
    expect((await call(t.app, "POST", "/api/user/sign")).status).toBe(401);
    expect((await call(t.app, "GET", "/api/user/sign/count")).status).toBe(401);
    const res = await call<number>(t.app, "GET", "/api/user/sign/count", { token: user.token });
    expect(res.body).toEqual({ success: true, data: 0 });
    // The user routes around them still work.
    expect((await call(t.app, "GET", `/api/user/${user.id}`, { token: user.token })).body.success).toBe(true);
    expect((await call(t.app, "GET", "/api/user/sign", { token: user.token })).status).toBe(400);
  });
});

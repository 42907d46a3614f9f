import { describe, expect, test } from "bun:test";
import type { DevSms, SmsPort } from "../../src/sms/index.ts";
import { TwilioSms } from "../../src/sms/index.ts";
import { keys } from "../../src/redis/keys.ts";
import { freePort } from "../../scripts/stack/engines.ts";
import { expireNow, frozenClock } from "../support/clock.ts";
import { call, loginAs, uniquePhone } from "../support/http.ts";
import { createTestApp } from "../support/stack.ts";

const lastCode = (sms: SmsPort, phone: string) => (sms as DevSms).lastCode(phone) as string;
const wrong = (code: string) => String((Number(code) + 1) % 1_000_000).padStart(6, "0");

describe("login codes", () => {
  test("a malformed phone is a 400 envelope and sends nothing", async () => {
    const { app, deps } = await createTestApp();
    for (const phone of ["12345", "23800000000", "1380000000a", ""]) {
      const res = await call(app, "POST", `/api/user/code?phone=${phone}`);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ success: false, code: "INVALID_INPUT" });
      expect(lastCode(deps.sms, phone)).toBeUndefined();
    }
  });

  test("a second code for the same phone within the interval is 429 with Retry-After", async () => {
    const { app } = await createTestApp();
    const phone = uniquePhone();
    expect((await call(app, "POST", `/api/user/code?phone=${phone}`)).body).toEqual({ success: true });
    const again = await call(app, "POST", `/api/user/code?phone=${phone}`, { ip: "10.9.9.9" });
    expect(again.status).toBe(429);
    expect(again.body.code).toBe("RATE_LIMITED");
    expect(Number(again.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  });

  test("a phone gets at most 5 codes an hour even when it respects the interval", async () => {
    // The default interval (LOGIN_CODE_PHONE_INTERVAL_SECONDS): after each send the interval's
    // window is ended by forced expiry (@upstash/ratelimit's fixed window `rl:code:phone:gap:{<phone>}:<bucket>`
    // keeps its own time, which no injected clock reaches), so only the hourly limit can refuse.
    const { app, deps } = await createTestApp();
    const phone = uniquePhone();
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      statuses.push((await call(app, "POST", `/api/user/code?phone=${phone}`, { ip: `10.1.1.${i}` })).status);
      const gap = await deps.redis.keys(`rl:code:phone:gap:{${phone}}:*`);
      expect(gap.length).toBe(1);
      await expireNow(deps.redis, ...gap);
    }
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429]);
  });

  test("one client address is limited across phones", async () => {
    const { app } = await createTestApp({ LOGIN_CODE_SENDS_PER_IP_HOUR: "3" });
    const ip = `10.2.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}`;
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++)
      statuses.push((await call(app, "POST", `/api/user/code?phone=${uniquePhone()}`, { ip })).status);
    expect(statuses).toEqual([200, 200, 200, 429]);
  });

  test("an SMS provider failure leaves no usable code behind", async () => {
    const failing: SmsPort = { sendLoginCode: async () => Promise.reject(new Error("provider down")) };
    const { app, deps } = await createTestApp({}, { sms: failing });
    const phone = uniquePhone();
    const res = await call(app, "POST", `/api/user/code?phone=${phone}`);
    expect(res.status).toBe(503);
    expect(res.body.success).toBe(false);
    expect(await deps.redis.exists(keys.loginCode(phone))).toBe(0);
  });
});

describe("login", () => {
  test("the right code logs in a new phone as a new user and returns a signed token", async () => {
    const { app, deps } = await createTestApp();
    const phone = uniquePhone();
    await call(app, "POST", `/api/user/code?phone=${phone}`);
    const res = await call<string>(app, "POST", "/api/user/login", {
      json: { phone, code: lastCode(deps.sms, phone) },
    });
    expect(res.body.success).toBe(true);
    // A compact JWT (HS256) whose 128-bit jti keeps it unique; signature checked in the isolate.
    expect(res.body.data).toMatch(/^[\w-]+\.[\w-]+\.[\w-]{43}$/);
    expect(await deps.isolate.sessions.keys.verify(res.body.data as string)).not.toBeNull();
    const me = await call<{ id: number; nickName: string; icon: string }>(app, "GET", "/api/user/me", {
      token: res.body.data,
    });
    expect(me.body.data?.nickName).toMatch(/^user_[a-z0-9]{10}$/);
    const row = (await deps.db.execute("SELECT id FROM tb_user WHERE phone = ?", [phone])).rows[0] as { id: string };
    expect(me.body.data?.id).toBe(Number(row.id));
  });

  test("a code works once; the same phone logs in again as the same user", async () => {
    const { app, deps } = await createTestApp();
    const phone = uniquePhone();
    await call(app, "POST", `/api/user/code?phone=${phone}`);
    const code = lastCode(deps.sms, phone);
    const first = await call<string>(app, "POST", "/api/user/login", { json: { phone, code } });
    const again = await call(app, "POST", "/api/user/login", { json: { phone, code } });
    expect(first.body.success).toBe(true);
    expect(again.body).toMatchObject({ success: false, code: "BAD_CODE" });
    expect(again.status).toBe(200);
  });

  test("of 20 concurrent logins with one code exactly one succeeds", async () => {
    const { app, deps } = await createTestApp();
    const phone = uniquePhone();
    await call(app, "POST", `/api/user/code?phone=${phone}`);
    const code = lastCode(deps.sms, phone);
    const results = await Promise.all(
      Array.from({ length: 20 }, () => call(app, "POST", "/api/user/login", { json: { phone, code } })),
    );
    expect(results.filter((r) => r.body.success).length).toBe(1);
    const users = (await deps.db.execute("SELECT COUNT(*) AS n FROM tb_user WHERE phone = ?", [phone])).rows[0] as {
      n: string;
    };
    expect(Number(users.n)).toBe(1);
  });

  test("5 wrong attempts burn the code: the right code fails afterwards", async () => {
    const { app, deps } = await createTestApp();
    const phone = uniquePhone();
    await call(app, "POST", `/api/user/code?phone=${phone}`);
    const code = lastCode(deps.sms, phone);
    const messages: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await call(app, "POST", "/api/user/login", { json: { phone, code: wrong(code) } });
      expect(r.body).toMatchObject({ success: false, code: "BAD_CODE" });
      messages.push(r.body.errorMsg as string);
    }
    expect(messages[0]).toContain("4 attempt(s) left");
    expect(messages[4]).toContain("too many attempts");
    const right = await call(app, "POST", "/api/user/login", { json: { phone, code } });
    expect(right.body).toMatchObject({ success: false, code: "BAD_CODE" });
  });

  test("an expired code is refused", async () => {
    const { app, deps } = await createTestApp();
    const phone = uniquePhone();
    await call(app, "POST", `/api/user/code?phone=${phone}`);
    await expireNow(deps.redis, keys.loginCode(phone));
    const r = await call(app, "POST", "/api/user/login", { json: { phone, code: lastCode(deps.sms, phone) } });
    expect(r.body).toEqual({ success: false, code: "BAD_CODE", errorMsg: "code expired or not requested" });
  });

  test("malformed login input is a 400 envelope: bad JSON, wrong types, bad phone, short code", async () => {
    const { app } = await createTestApp();
    const bad = await call(app, "POST", "/api/user/login", {
      body: "{not json",
      headers: { "content-type": "application/json" },
    });
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ success: false, code: "INVALID_INPUT", errorMsg: "malformed JSON body" });
    for (const json of [
      { phone: 13800000000, code: "123456" },
      { phone: "1380000", code: "123456" },
      { phone: uniquePhone(), code: "12" },
      [],
    ]) {
      const r = await call(app, "POST", "/api/user/login", { json });
      expect(r.status).toBe(400);
      expect(r.body.code).toBe("INVALID_INPUT");
    }
  });

  test("an oversized body is refused with 413 before it is read", async () => {
    const { app } = await createTestApp({ MAX_BODY_BYTES: "1024" });
    const r = await call(app, "POST", "/api/user/login", {
      json: { phone: "13800000000", code: "123456", pad: "x".repeat(5000) },
    });
    expect(r.status).toBe(413);
    expect(r.body.code).toBe("PAYLOAD_TOO_LARGE");
  });
});

describe("sessions", () => {
  test("protected routes answer 401 without a token, with a garbage token and after logout", async () => {
    const { app, deps } = await createTestApp();
    expect((await call(app, "GET", "/api/user/me")).status).toBe(401);
    expect((await call(app, "GET", "/api/user/me", { token: "nope" })).status).toBe(401);
    const { token } = await loginAs(app, deps);
    expect((await call(app, "GET", "/api/user/me", { token: `Bearer ${token}` })).body.success).toBe(true);
    expect((await call(app, "POST", "/api/user/logout", { token })).body).toEqual({ success: true });
    const after = await call(app, "GET", "/api/user/me", { token });
    expect(after.status).toBe(401);
    expect(after.body).toMatchObject({ success: false, code: "UNAUTHORIZED" });
  });

  test("use slides the session TTL (in the background, once per renew interval); an expired session is 401", async () => {
    // The isolate's session upkeep runs on deps.clock (tests/routes/session.test.ts has the details).
    const clock = frozenClock();
    const { app, deps, settle } = await createTestApp(
      { SESSION_TTL_SECONDS: "600", SESSION_RENEW_SECONDS: "60" },
      { clock },
    );
    const { token } = await loginAs(app, deps);
    await deps.redis.expire(keys.loginToken(token), 5);
    await call(app, "GET", "/api/user/me", { token });
    await settle();
    expect(await deps.redis.ttl(keys.loginToken(token))).toBeGreaterThan(590);
    await expireNow(deps.redis, keys.loginToken(token));
    clock.advance(61_000);
    await call(app, "GET", "/api/user/me", { token });
    await settle();
    expect((await call(app, "GET", "/api/user/me", { token })).status).toBe(401);
  });

  test("user cards and profiles: found, missing, malformed id", async () => {
    const { app, deps } = await createTestApp();
    const { token } = await loginAs(app, deps);
    const me = (await call<{ id: number }>(app, "GET", "/api/user/me", { token })).body.data as { id: number };
    expect((await call(app, "GET", `/api/user/${me.id}`, { token })).body).toMatchObject({
      success: true,
      data: { id: me.id },
    });
    expect((await call(app, "GET", "/api/user/999999999999", { token })).body).toMatchObject({
      success: false,
      code: "NOT_FOUND",
    });
    expect((await call(app, "GET", `/api/user/info/${me.id}`, { token })).body).toEqual({ success: true });
    await deps.db.execute("INSERT INTO tb_user_info (user_id, city, birthday) VALUES (?, '杭州', '1995-04-01')", [
      me.id,
    ]);
    expect((await call(app, "GET", `/api/user/info/${me.id}`, { token })).body).toMatchObject({
      success: true,
      data: { city: "杭州", birthday: "1995-04-01", fans: 0 },
    });
    for (const id of ["abc", "-1", "0", "1.5", "99999999999999999999"]) {
      const r = await call(app, "GET", `/api/user/${id}`, { token });
      expect(r.status, id).toBe(400);
    }
  });
});

test("the Twilio adapter posts the code with basic auth to the Messages API", async () => {
  const port = await freePort();
  let seen: { path: string; auth: string | null; form: URLSearchParams } | undefined;
  const server = Bun.serve({
    port,
    hostname: "127.0.0.1",
    fetch: async (req) => {
      seen = {
        path: new URL(req.url).pathname,
        auth: req.headers.get("authorization"),
        form: new URLSearchParams(await req.text()),
      };
      return new Response(JSON.stringify({ sid: "SM1" }), { status: 201 });
    },
  });
  try {
    const sms = new TwilioSms({
      accountSid: "AC123",
      authToken: "secret",
      from: "+15550001",
      apiUrl: `http://127.0.0.1:${port}`,
    });
    await sms.sendLoginCode("13800000000", "123456");
    expect(seen?.path).toBe("/2010-04-01/Accounts/AC123/Messages.json");
    expect(seen?.auth).toBe(`Basic ${btoa("AC123:secret")}`);
    expect(seen?.form.get("To")).toBe("+8613800000000");
    expect(seen?.form.get("Body")).toContain("123456");
    const failing = new TwilioSms({
      accountSid: "AC123",
      authToken: "secret",
      from: "+1",
      apiUrl: `http://127.0.0.1:${await freePort()}`,
    });
    await expect(failing.sendLoginCode("13800000000", "1")).rejects.toThrow();
  } finally {
    await server.stop(true);
  }
});

test("a warm authenticated request resolves its session with no Redis call", async () => {
  const now = Date.now();
  const { app, deps, stack, settle } = await createTestApp({}, { clock: { now: () => now } });
  const { token } = await loginAs(app, deps);
  // A first request lets the once-a-day UV write and the periodic cache-metrics flush happen.
  await call(app, "GET", "/api/user/me", { token });
  await settle();
  const before = stack.rest.stats().requests;
  expect((await call(app, "GET", "/api/user/me", { token })).body.success).toBe(true);
  expect(stack.rest.stats().requests - before).toBe(0);
});

/**
 * The client address comes from the runtime (the entry's `{ clientIp }`: the socket on Bun/Deno,
 * `cf-connecting-ip` as passed by the Worker entry), from `x-forwarded-for` only with TRUST_PROXY.
 * Headers a client sends itself never move it between per-IP limits or UV visitors.
 */
import { describe, expect, test } from "bun:test";
import { keys } from "../../src/redis/keys.ts";
import { call, uniquePhone } from "../support/http.ts";
import { createSeckill, sessionsFor, userIds } from "../support/seckill.ts";
import { manualClock } from "../support/social.ts";
import { createTestApp, serveTestApp } from "../support/stack.ts";

/** A fresh address per test, so rate-limit windows never overlap between tests or runs of one process. */
const freshIp = () =>
  `10.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}.${1 + Math.floor(Math.random() * 250)}`;

/** Headers a client could send to pose as someone else: fresh addresses every call. */
const spoofs = (i: number): Record<string, string> => ({
  "cf-connecting-ip": `${freshIp()}`,
  "x-forwarded-for": `${freshIp()}, 10.0.0.${i}`,
  "x-real-ip": freshIp(),
});

describe("per-IP limits follow the runtime's address, not the client's headers", () => {
  test("login-code sends per IP: spoofed cf-connecting-ip / x-forwarded-for do not open a new allowance", async () => {
    const { app } = await createTestApp({ LOGIN_CODE_SENDS_PER_IP_HOUR: "2" });
    const ip = freshIp();
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++)
      statuses.push(
        (await call(app, "POST", `/api/user/code?phone=${uniquePhone()}`, { ip, headers: spoofs(i) })).status,
      );
    expect(statuses).toEqual([200, 200, 429, 429]);
    // Another socket address is another allowance.
    expect(
      (await call(app, "POST", `/api/user/code?phone=${uniquePhone()}`, { ip: freshIp(), headers: spoofs(9) })).status,
    ).toBe(200);
  });

  test("over a real Bun socket: the server's peer address is the client address whatever cf-connecting-ip says", async () => {
    const t = await serveTestApp({ LOGIN_CODE_SENDS_PER_IP_HOUR: "1" });
    try {
      // Other tests of this process may have used 127.0.0.1's allowance already: the first send may be 200 or 429.
      const statuses: number[] = [];
      for (let i = 0; i < 3; i++)
        statuses.push(
          (await fetch(`${t.url}/api/user/code?phone=${uniquePhone()}`, { method: "POST", headers: spoofs(i) })).status,
        );
      expect(statuses.slice(1)).toEqual([429, 429]);
    } finally {
      await t.stop();
    }
  });

  test("seckill per-IP limit: buyers behind one address stay in one window whatever headers they send", async () => {
    const t = await createTestApp({
      SECKILL_IP_LIMIT: "2",
      SECKILL_IP_WINDOW_MS: "60000",
      SECKILL_USER_LIMIT: "0",
      ORDER_PAY_TIMEOUT_SECONDS: "86400",
    });
    const { voucherId } = await createSeckill(t, { stock: 50 });
    const tokens = await sessionsFor(t, userIds(4));
    const ip = freshIp();
    const codes: (string | undefined)[] = [];
    for (const [i, token] of tokens.entries()) {
      const res = await call(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, {
        token,
        ip,
        headers: spoofs(i),
      });
      codes.push(res.body.success ? "OK" : res.body.code);
    }
    expect(codes).toEqual(["OK", "OK", "RATE_LIMITED", "RATE_LIMITED"]);
    await t.settle();
  });
});

/** A fresh /64 per test: 2001:db8:<random>:<random>::/64. */
const freshV6Net = () =>
  `2001:db8:${Math.floor(Math.random() * 0xffff).toString(16)}:${Math.floor(Math.random() * 0xffff).toString(16)}`;
/** A different address of `net` on every call (what a caller with a /64 rotates through). */
const inNet = (net: string, i: number) =>
  `${net}:${(0x1000 + i).toString(16)}:${Math.floor(Math.random() * 0xffff).toString(16)}:9:${i + 1}`;

describe("IPv6: every per-address limit counts a /64 (LIMIT_IPV6_PREFIX) as one caller", () => {
  test("login-code sends: 10 addresses of one /64 share one allowance; another /64 is another caller", async () => {
    const { app } = await createTestApp({ LOGIN_CODE_SENDS_PER_IP_HOUR: "2" });
    const net = freshV6Net();
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++)
      statuses.push((await call(app, "POST", `/api/user/code?phone=${uniquePhone()}`, { ip: inNet(net, i) })).status);
    expect(statuses).toEqual([200, 200, 429, 429, 429, 429, 429, 429, 429, 429]);
    expect(
      (await call(app, "POST", `/api/user/code?phone=${uniquePhone()}`, { ip: inNet(freshV6Net(), 0) })).status,
    ).toBe(200);
  });

  test("seckill attempts: buyers rotating through one /64 stay in one per-address window", async () => {
    const t = await createTestApp({
      SECKILL_IP_LIMIT: "2",
      SECKILL_IP_WINDOW_MS: "60000",
      SECKILL_USER_LIMIT: "0",
      ORDER_PAY_TIMEOUT_SECONDS: "86400",
    });
    const { voucherId } = await createSeckill(t, { stock: 50 });
    const tokens = await sessionsFor(t, userIds(6));
    const net = freshV6Net();
    const codes: (string | undefined)[] = [];
    for (const [i, token] of tokens.entries()) {
      const res = await call(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token, ip: inNet(net, i) });
      codes.push(res.body.success ? "OK" : res.body.code);
    }
    expect(codes).toEqual(["OK", "OK", "RATE_LIMITED", "RATE_LIMITED", "RATE_LIMITED", "RATE_LIMITED"]);
    await t.settle();
  });

  test("the prefix is configurable: with /48 two /64s of one /48 share the allowance", async () => {
    const { app } = await createTestApp({ LOGIN_CODE_SENDS_PER_IP_HOUR: "1", LIMIT_IPV6_PREFIX: "48" });
    const a = Math.floor(Math.random() * 0xffff).toString(16);
    const send = (ip: string) => call(app, "POST", `/api/user/code?phone=${uniquePhone()}`, { ip });
    expect((await send(`2001:db8:${a}:1::1`)).status).toBe(200);
    expect((await send(`2001:db8:${a}:2::1`)).status).toBe(429);
    const { limitKeyOf } = await import("../../src/http/client-ip.ts");
    expect(limitKeyOf("2001:db8:abcd:12ff::1", 56)).toBe("2001:db8:abcd:1200::/56");
    expect(limitKeyOf("2001:db8:abcd:12ff::1", 128)).toBe("2001:db8:abcd:12ff:0:0:0:1/128");
    expect(limitKeyOf("not:an:address", 64)).toBe("not:an:address");
  });
});

describe("TRUST_PROXY", () => {
  test("with TRUST_PROXY the first x-forwarded-for hop is the address; cf-connecting-ip is still ignored", async () => {
    const { app } = await createTestApp({ LOGIN_CODE_SENDS_PER_IP_HOUR: "1", TRUST_PROXY: "true" });
    const socket = freshIp();
    const client = freshIp();
    const send = (headers: Record<string, string>, ip = socket) =>
      call(app, "POST", `/api/user/code?phone=${uniquePhone()}`, { ip, headers });
    expect((await send({ "x-forwarded-for": `${client}, 10.0.0.1` })).status).toBe(200);
    // The same first hop through another proxy socket: the same client, already at its limit.
    expect((await send({ "x-forwarded-for": `${client}, 10.0.0.2` }, freshIp())).status).toBe(429);
    // Another first hop is another client, even from the same proxy socket.
    expect((await send({ "x-forwarded-for": freshIp() })).status).toBe(200);
    // cf-connecting-ip changes nothing: without x-forwarded-for the socket's own allowance applies.
    expect((await send({ "cf-connecting-ip": freshIp() })).status).toBe(200);
    expect((await send({ "cf-connecting-ip": freshIp() })).status).toBe(429);
  });

  test("a first hop that is not an address falls back to the socket address", async () => {
    const { app } = await createTestApp({ LOGIN_CODE_SENDS_PER_IP_HOUR: "1", TRUST_PROXY: "true" });
    const socket = freshIp();
    const send = (xff: string) =>
      call(app, "POST", `/api/user/code?phone=${uniquePhone()}`, { ip: socket, headers: { "x-forwarded-for": xff } });
    expect((await send("not an address")).status).toBe(200);
    expect((await send(`${"1".repeat(60)}, 10.0.0.1`)).status).toBe(429);
  });

  test("without TRUST_PROXY x-forwarded-for is ignored", async () => {
    const { app } = await createTestApp({ LOGIN_CODE_SENDS_PER_IP_HOUR: "1" });
    const socket = freshIp();
    expect(
      (
        await call(app, "POST", `/api/user/code?phone=${uniquePhone()}`, {
          ip: socket,
          headers: { "x-forwarded-for": freshIp() },
        })
      ).status,
    ).toBe(200);
    expect(
      (
        await call(app, "POST", `/api/user/code?phone=${uniquePhone()}`, {
          ip: socket,
          headers: { "x-forwarded-for": freshIp() },
        })
      ).status,
    ).toBe(429);
  });
});

describe("UV", () => {
  test("an anonymous visitor rotating its User-Agent (or its address within a /64) is one visitor", async () => {
    const clock = manualClock(Date.parse("2043-04-11T12:00:00+08:00"));
    const t = await createTestApp({}, { clock });
    const ip = freshIp();
    const net = freshV6Net();
    for (let i = 0; i < 30; i++) {
      expect(
        (
          await call(t.app, "GET", "/api/shop-type/list", {
            ip,
            headers: { "user-agent": `agent-${i}-${crypto.randomUUID()}` },
          })
        ).status,
      ).toBe(200);
      expect(
        (
          await call(t.app, "GET", "/api/shop-type/list", {
            ip: inNet(net, i),
            headers: { "user-agent": `agent-${i}` },
          })
        ).status,
      ).toBe(200);
    }
    await t.settle();
    await t.deps.isolate.uv.flush(t.deps);
    expect(await t.deps.redis.pfcount(keys.uv("20430411"))).toBe(2);
  });

  test("spoofed address headers do not make one anonymous visitor several", async () => {
    // A day no other test counts on, so PFCOUNT is exactly this test's visitors.
    const clock = manualClock(Date.parse("2043-03-07T12:00:00+08:00"));
    const t = await createTestApp({}, { clock });
    const ip = freshIp();
    for (let i = 0; i < 5; i++) {
      const res = await call(t.app, "GET", "/api/shop-type/list", {
        ip,
        headers: { ...spoofs(i), "user-agent": "uv-spoof-agent" },
      });
      expect(res.status).toBe(200);
    }
    await t.settle();
    // Visitors are sent in batches (deps.isolate.uv): send this isolate's batch now.
    await t.deps.isolate.uv.flush(t.deps);
    expect(await t.deps.redis.pfcount(keys.uv("20430307"))).toBe(1);
    // A different socket address is a different visitor.
    await call(t.app, "GET", "/api/shop-type/list", { ip: freshIp(), headers: { "user-agent": "uv-spoof-agent" } });
    await t.settle();
    await t.deps.isolate.uv.flush(t.deps);
    expect(await t.deps.redis.pfcount(keys.uv("20430307"))).toBe(2);
  });
});

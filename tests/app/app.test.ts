import { describe, expect, test } from "bun:test";
import { createTestApp } from "../support/stack.ts";
import { createDeps } from "../../src/deps.ts";
import { parseEnv } from "../../src/env.ts";
import { createApp } from "../../src/app.ts";
import { freePort } from "../../scripts/stack/engines.ts";

describe("app skeleton", () => {
  test("/health is green with Redis and MySQL reported separately: anyone sees up/down, operators the detail", async () => {
    const { app, deps } = await createTestApp();
    const res = await app.request("/health");
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ success: true, data: { ok: true, redis: "up", mysql: "up" } });
    const op = await app.request("/health", { headers: { authorization: `Bearer ${deps.config.ADMIN_TOKEN}` } });
    const body = (await op.json()) as {
      success: boolean;
      data: {
        ok: boolean;
        redis: { ok: boolean; latencyMs: number };
        mysql: { ok: boolean };
        breakers: Record<string, unknown>;
      };
    };
    expect(body.data.redis.ok).toBe(true);
    expect(body.data.mysql.ok).toBe(true);
    expect(typeof body.data.redis.latencyMs).toBe("number");
    expect(body.data.breakers.redis).toBeDefined();
  });

  test("/health answers 503 naming Redis when Redis is unreachable, MySQL still reported up; errors only for operators", async () => {
    const dead = `http://127.0.0.1:${await freePort()}`;
    const { app, deps } = await createTestApp({ UPSTASH_REDIS_REST_URL: dead });
    const res = await app.request("/health");
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({ success: false, data: { ok: false, redis: "down", mysql: "up" } });
    const op = await app.request("/health", { headers: { authorization: `Bearer ${deps.config.ADMIN_TOKEN}` } });
    const body = (await op.json()) as {
      success: boolean;
      data: { redis: { ok: boolean; error?: string }; mysql: { ok: boolean } };
    };
    expect(body.data.redis.ok).toBe(false);
    expect(body.data.redis.error).toBeString();
    expect(body.data.mysql.ok).toBe(true);
  });

  test("/health answers 503 naming MySQL when the database rejects us, Redis still reported up; the database password never appears", async () => {
    const { app, stack } = await createTestApp();
    const badDb = stack.env.DATABASE_URL?.replace(/:[^:@/]+@/, ":wrong-password-9f3k2@") as string;
    const deps = createDeps(parseEnv({ ...stack.env, DATABASE_URL: badDb, LOG_LEVEL: "silent" }));
    const broken = createApp(deps);
    const res = await broken.request("/health");
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({ success: false, data: { ok: false, redis: "up", mysql: "down" } });
    const op = await broken.request("/health", { headers: { authorization: `Bearer ${deps.config.ADMIN_TOKEN}` } });
    const text = await op.text();
    expect(JSON.parse(text).data.mysql.ok).toBe(false);
    expect(text).not.toContain("wrong-password-9f3k2");
    expect((await app.request("/health")).status).toBe(200);
  });

  test("an unknown route is a 404 envelope with code NOT_FOUND and a request id", async () => {
    const { app } = await createTestApp();
    const res = await app.request("/api/nope");
    expect(res.status).toBe(404);
    const rid = res.headers.get("x-request-id");
    expect(rid).toBeString();
    expect(await res.json()).toEqual({
      success: false,
      code: "NOT_FOUND",
      errorMsg: "no route for GET /api/nope",
      requestId: rid as string,
    });
  });

  test("every response carries a request id, and security headers", async () => {
    const { app } = await createTestApp();
    const a = await app.request("/health");
    const b = await app.request("/health");
    expect(a.headers.get("x-request-id")).not.toBe(b.headers.get("x-request-id"));
    expect(a.headers.get("x-content-type-options")).toBe("nosniff");
  });

  test("invalid configuration fails with every problem listed", () => {
    expect(() => parseEnv({ UPSTASH_REDIS_REST_URL: "not a url", ADMIN_TOKEN: "short" })).toThrow(
      /UPSTASH_REDIS_REST_URL[\s\S]*DATABASE_URL[\s\S]*ADMIN_TOKEN/,
    );
  });
});

describe("/health costs the caller, not us", () => {
  test("anonymous /health is probed at most once per second per isolate; operators always probe", async () => {
    const clock = { ms: Date.now(), now: () => clock.ms };
    const t = await createTestApp({}, { clock });
    expect((await t.app.request("/health")).status).toBe(200);
    const before = t.stack.rest.stats().requests;
    for (let i = 0; i < 50; i++) expect((await t.app.request("/health")).status).toBe(200);
    // 50 answers, no PING (at most one background metrics flush of this app rides along).
    expect(t.stack.rest.stats().requests - before).toBeLessThanOrEqual(1);
    clock.ms += 1_000;
    const again = t.stack.rest.stats().requests;
    await t.app.request("/health");
    expect(t.stack.rest.stats().requests - again).toBeGreaterThanOrEqual(1);
    const op = await t.app.request("/health", { headers: { authorization: `Bearer ${t.deps.config.ADMIN_TOKEN}` } });
    expect(((await op.json()) as { data: { redis: { ok: boolean } } }).data.redis.ok).toBe(true);
  });
});

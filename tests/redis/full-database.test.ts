/**
 * A full or evicting Redis (docs/decisions/redis-eviction.md), on a private redis-server behind the
 * Upstash-REST stand-in. With `noeviction` a full database refuses writes ("OOM command not
 * allowed"): a reservation is then answered 503 + Retry-After (never a 500, never a sale), a drain
 * writes nothing it cannot also settle, and once there is room again every reservation that was
 * acknowledged reaches MySQL. With an evicting policy the service refuses to run at all: an
 * evicted outbox entry, buyers set or stock key would lose or oversell what was acknowledged.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "@upstash/redis";
import { freePort, startRedis, type Engine } from "../../scripts/stack/engines.ts";
import { startUpstashRest, type UpstashRestServer } from "../../scripts/stack/upstash-rest.ts";
import { checkEviction, EvictingRedisError } from "../../src/redis/eviction.ts";
import { drainShop } from "../../src/services/seckill/writer.ts";
import { within } from "../support/child.ts";
import { call } from "../support/http.ts";
import { createSeckill, mysqlCounts, retireVouchers, sessionsFor, userIds } from "../support/seckill.ts";
import { createTestApp, getStack } from "../support/stack.ts";

const TOKEN = "full-database-test-token";
let dir: string;
let engine: Engine;
let rest: UpstashRestServer;
let admin: Redis;
const retire: number[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "full-db-test-"));
  engine = await startRedis({ dir });
  rest = await startUpstashRest({ redisHost: engine.host, redisPort: engine.port, token: TOKEN });
  admin = new Redis({ url: rest.url, token: TOKEN, retry: false, enableTelemetry: false });
});

afterAll(async () => {
  const stack = await getStack();
  const t = await createTestApp({ UPSTASH_REDIS_REST_URL: stack.env.UPSTASH_REDIS_REST_URL as string });
  await retireVouchers(t.deps, retire);
  await rest?.stop();
  await engine?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function setPolicy(policy: string, maxmemory = 0): Promise<void> {
  await admin.exec(["CONFIG", "SET", "maxmemory-policy", policy]);
  await admin.exec(["CONFIG", "SET", "maxmemory", String(maxmemory)]);
}

async function usedMemory(): Promise<number> {
  const info = String(await admin.exec(["INFO", "memory"]));
  return Number(/used_memory:(\d+)/.exec(info)?.[1]);
}

test("noeviction, full: reservations are 503 with Retry-After, and every acknowledged one reaches MySQL once there is room", async () => {
  await setPolicy("noeviction");
  const t = await createTestApp({
    UPSTASH_REDIS_REST_URL: rest.url,
    UPSTASH_REDIS_REST_TOKEN: TOKEN,
    SECKILL_USER_LIMIT: "0",
    SECKILL_IP_LIMIT: "0",
    SOLD_OUT_MEMO_MS: "0",
    BREAKER_MIN_CALLS: "100000",
  });
  const { shopId, voucherId } = await createSeckill(t, { stock: 50 });
  retire.push(voucherId);
  const buyers = userIds(40);
  const tokens = await sessionsFor(t, buyers);
  const attempt = (token: string | undefined) =>
    call(t.app, "POST", `/api/voucher-order/seckill/${voucherId}`, { token });
  // Room: the first ten are sold.
  const before = await Promise.all(tokens.slice(0, 10).map(attempt));
  expect(before.every((r) => r.status === 200 && r.body.success)).toBe(true);

  // Full: no write fits any more (maxmemory below what is used).
  await setPolicy("noeviction", Math.max(1, (await usedMemory()) - 1));
  const during = await Promise.all(tokens.slice(10, 30).map(attempt));
  const acknowledged = 10 + during.filter((r) => r.status === 200 && r.body.success).length;
  for (const r of during.filter((x) => !(x.status === 200 && x.body.success))) {
    expect({ status: r.status, code: r.body.code }).toEqual({ status: 503, code: "UNAVAILABLE" });
    expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  }
  expect(during.some((r) => r.status === 503)).toBe(true);
  // A drain against the full database fails or writes; it never drops an entry.
  await drainShop(t.deps, shopId).catch(() => undefined);

  // Room again: the rest buy, and a drain writes every acknowledged reservation.
  await setPolicy("noeviction");
  const after = await Promise.all(tokens.slice(30).map(attempt));
  expect(after.every((r) => r.status === 200 && r.body.success)).toBe(true);
  await drainShop(t.deps, shopId);
  await t.settle();
  expect((await mysqlCounts(t, voucherId)).orders).toBe(acknowledged + after.length);
  expect(Number(await admin.hlen(`seckill:{s${shopId}}:outbox`))).toBe(0);
}, 60_000);

test("the eviction check: noeviction passes; an evicting policy is refused; a database that will not say is unknown", async () => {
  await setPolicy("noeviction");
  expect(await checkEviction(admin)).toBe("noeviction");
  for (const policy of ["allkeys-lru", "volatile-lru", "allkeys-lfu", "volatile-ttl", "allkeys-random"]) {
    await setPolicy(policy);
    await expect(checkEviction(admin)).rejects.toBeInstanceOf(EvictingRedisError);
  }
  await setPolicy("noeviction");
  // A database that refuses CONFIG (as Upstash may): nothing can be learnt, nothing is refused.
  const mute = new Redis({ url: rest.url, token: TOKEN, retry: false, enableTelemetry: false });
  mute.use(async (req, next) => {
    if (JSON.stringify(req.body).toUpperCase().includes("CONFIG"))
      throw new Error("ERR Command is not available: 'CONFIG'");
    return await next(req);
  });
  expect(await checkEviction(mute)).toBeNull();
});

test("with an evicting policy the Bun server refuses to start (exit 1, naming the setting)", async () => {
  const stack = await getStack();
  await setPolicy("allkeys-lru");
  try {
    const child = Bun.spawn([process.execPath, "src/entry/bun.ts"], {
      env: {
        ...process.env,
        ...(stack.env as Record<string, string>),
        UPSTASH_REDIS_REST_URL: rest.url,
        UPSTASH_REDIS_REST_TOKEN: TOKEN,
        PORT: String(await freePort()),
        RUN_CRON: "false",
        LOG_LEVEL: "silent",
      },
      stdout: "pipe",
      stderr: "pipe",
    });
    const code = await within(30_000, "the server to exit", child.exited);
    if (code !== 1) child.kill("SIGKILL");
    expect(code).toBe(1);
    expect(await new Response(child.stderr).text()).toContain("maxmemory-policy");
  } finally {
    await setPolicy("noeviction");
  }
}, 40_000);

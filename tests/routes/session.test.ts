import { describe, expect, test } from "bun:test";
import type { Clock, Deps, RedisPort } from "../../src/deps.ts";
import { parseEnv } from "../../src/env.ts";
import { keys } from "../../src/redis/keys.ts";
import { scriptsFor } from "../../src/redis/scripts.ts";
import { createSession, SessionKeys } from "../../src/services/session.ts";
import { call, loginAs } from "../support/http.ts";
import { createTestApp, getStack, type TestApp } from "../support/stack.ts";

/** A clock the test moves: background upkeep becomes due exactly when the test says so. */
function manualClock(start = Date.now()): Clock & { advance(ms: number): void } {
  let t = start;
  return { now: () => t, advance: (ms) => void (t += ms) };
}

/**
 * Counts the commands an app sends through its Redis client (scripts included: the SDK's Script
 * calls back into the client it was created from). `session` counts those touching session keys
 * (login:token:*, login:revoked*), so UV and metrics flushes of the same app do not blur the figure.
 */
function countingRedis(redis: RedisPort): { redis: RedisPort; all: () => number; session: () => number } {
  let all = 0;
  let session = 0;
  const proxy: RedisPort = new Proxy(redis, {
    get(target, prop, _receiver) {
      const v = Reflect.get(target, prop, target) as unknown;
      if (typeof v !== "function") return v;
      return (...args: unknown[]) => {
        const out = (v as (...a: unknown[]) => unknown).apply(prop === "createScript" ? proxy : target, args);
        if (prop === "createScript") return out;
        if (prop === "pipeline" || prop === "multi") {
          // Counted when sent (a pipeline built and dropped, as the metrics flush may do, sends nothing).
          return new Proxy(out as object, {
            get(p, k) {
              const m = Reflect.get(p, k, p) as unknown;
              if (k !== "exec" || typeof m !== "function")
                return typeof m === "function"
                  ? (...a: unknown[]) => (m as (...x: unknown[]) => unknown).apply(p, a)
                  : m;
              return (...a: unknown[]) => {
                all++;
                return (m as (...x: unknown[]) => unknown).apply(p, a);
              };
            },
          });
        }
        all++;
        if (/login:(token|revoked)/.test(JSON.stringify(args))) session++;
        return out;
      };
    },
  });
  return { redis: proxy, all: () => all, session: () => session };
}

async function counted(
  env: Record<string, string> = {},
  clock = manualClock(),
): Promise<TestApp & { clock: ReturnType<typeof manualClock>; count: ReturnType<typeof countingRedis> }> {
  let count!: ReturnType<typeof countingRedis>;
  const t = await createTestApp(env, {
    clock,
    wrap: (deps: Deps) => {
      count = countingRedis(deps.redis);
      return { ...deps, redis: count.redis };
    },
  });
  return { ...t, clock, count };
}

const me = (t: TestApp, token: string) =>
  call<{ id: number; nickName: string }>(t.app, "GET", "/api/user/me", { token });
let nextId = 8_000_000 + Math.floor(Math.random() * 1_000_000) * 100;
const user = () => {
  const id = nextId++;
  return { id, nickName: `s${id}`, icon: "/imgs/icons/a.png" };
};

describe("session tokens", () => {
  test("forged, truncated, garbage and wrong-key tokens are 401 with no Redis command", async () => {
    const t = await counted({ SESSION_LEGACY_TOKENS: "false" });
    const u = user();
    const good = await createSession(t.deps.redis, u, 600, t.deps.isolate.sessions.keys);
    const [h, p, s] = good.split(".") as [string, string, string];
    const claims = JSON.parse(atob(p.replace(/-/g, "+").replace(/_/g, "/"))) as Record<string, unknown>;
    const b64 = (o: unknown) => btoa(JSON.stringify(o)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    const otherKey = new SessionKeys(`other_${"x".repeat(40)}`);
    const bad = [
      `${h}.${b64({ ...claims, sub: String(u.id + 1) })}.${s}`, // claims changed, old signature
      `${b64({ alg: "none", typ: "JWT" })}.${p}.`, // alg none
      `${b64({ alg: "HS512", typ: "JWT" })}.${p}.${s}`,
      good.slice(0, -1),
      good.slice(0, good.length - 10),
      `${h}.${p}`,
      "nope",
      "a.b.c",
      "0123456789abcdef0123456789abcdef", // legacy shape, legacy tokens off
      "x".repeat(5000),
      await otherKey.sign(u, Date.now()),
    ];
    const before = { session: t.count.session(), all: t.count.all() };
    for (const token of bad) {
      const r = await me(t, token);
      expect(r.status, token.slice(0, 40)).toBe(401);
      expect(r.body.code).toBe("UNAUTHORIZED");
    }
    // Counted at the app's Redis client: nothing at all was sent, session-related or not.
    expect(t.count.session() - before.session).toBe(0);
    expect(t.count.all() - before.all).toBe(0);
  });

  test("a token signed with the previous key still works, new tokens use the current key, and dropping the previous key ends it", async () => {
    const oldSecret = `old_${crypto.randomUUID()}`;
    const newSecret = `new_${crypto.randomUUID()}`;
    const rotated = await counted({ SESSION_SECRET: newSecret, SESSION_SECRET_PREVIOUS: oldSecret });
    const u = user();
    const oldToken = await createSession(rotated.deps.redis, u, 600, new SessionKeys(oldSecret));
    expect((await me(rotated, oldToken)).body).toMatchObject({
      success: true,
      data: { id: u.id, nickName: u.nickName },
    });
    const { token: fresh } = await loginAs(rotated.app, rotated.deps);
    expect(await new SessionKeys(newSecret).verify(fresh)).not.toBeNull();
    expect(await new SessionKeys(oldSecret).verify(fresh)).toBeNull();
    const after = await counted({ SESSION_SECRET: newSecret });
    expect((await me(after, oldToken)).status).toBe(401);
    expect((await me(after, fresh)).status).toBe(200);
  });

  test("login returns the raw token, its record is the classic hash under a key named by the session (never the raw token), and Bearer works too", async () => {
    const t = await counted();
    const { token } = await loginAs(t.app, t.deps);
    const jti = (
      JSON.parse(atob((token.split(".")[1] as string).replace(/-/g, "+").replace(/_/g, "/"))) as { jti: string }
    ).jti;
    expect(keys.loginToken(token)).toBe(`login:token:j:${jti}`);
    expect(await t.deps.redis.exists(`login:token:${token}`)).toBe(0);
    // No key anywhere carries the bearer token (nor its signature).
    const signature = token.split(".")[2] as string;
    let cursor = "0";
    do {
      const [next, found] = await t.deps.redis.scan(cursor, { match: "login:*", count: 1000 });
      cursor = String(next);
      for (const k of found) expect(k.includes(signature)).toBe(false);
    } while (cursor !== "0");
    const rec = await t.deps.redis.hgetall<Record<string, string | number>>(keys.loginToken(token));
    const who = (await me(t, `Bearer ${token}`)).body.data as { id: number; nickName: string };
    expect(Number(rec?.id)).toBe(who.id);
    expect(rec?.nickName).toBe(who.nickName);
    expect(await t.deps.redis.ttl(keys.loginToken(token))).toBeGreaterThan(1700);
  });

  test("an env without SESSION_SECRET, or with a short one, is rejected by parseEnv (a Worker answers BAD_ENVIRONMENT)", async () => {
    const { SESSION_SECRET: secret, ...rest } = (await getStack()).env;
    expect(() => parseEnv(rest)).toThrow(/SESSION_SECRET is required/);
    expect(() => parseEnv({ ...rest, SESSION_SECRET: "short-secret" })).toThrow(/SESSION_SECRET must be at least 32/);
    expect(() =>
      parseEnv({ ...rest, SESSION_SECRET: secret, SESSION_SYNC_MS: "3000", SESSION_TRUST_MS: "5000" }),
    ).toThrow(/SESSION_TRUST_MS/);
    expect(parseEnv({ ...rest, SESSION_SECRET: secret }).SESSION_SECRET).toBe(secret as string);
  });
});

describe("the isolate's session cache", () => {
  test("warm GET /api/user/me makes no Redis command, and upkeep over 500 requests from 100 sessions stays ≤ 0.05 per request", async () => {
    const t = await counted();
    const tokens = await Promise.all(
      Array.from({ length: 100 }, () => createSession(t.deps.redis, user(), 600, t.deps.isolate.sessions.keys)),
    );
    // Cold isolate: its first authenticated request waits for one sync (the trust bound).
    expect((await me(t, tokens[0] as string)).status).toBe(200);
    await t.settle();

    // Phase 1: the clock stands still, so no upkeep is due: every request is answered from memory.
    const before = { all: t.count.all(), session: t.count.session() };
    for (let i = 0; i < 500; i++) expect((await me(t, tokens[i % 100] as string)).status).toBe(200);
    const frozen = { all: t.count.all() - before.all, session: t.count.session() - before.session };
    expect(frozen.session).toBe(0);
    await t.settle();

    // Phase 2: 500 requests over 10 s of isolate time (upkeep due every 2 s): background only.
    const mid = t.count.session();
    for (let i = 0; i < 500; i++) {
      t.clock.advance(20);
      expect((await me(t, tokens[(i * 7) % 100] as string)).status).toBe(200);
    }
    await t.settle();
    const upkeep = t.count.session() - mid;
    const syncs = t.deps.isolate.sessions.stats().syncs;
    console.log(
      `session commands: 500 warm (clock still) ${frozen.session} (all commands ${frozen.all}); 500 over 10 s: ${upkeep} (${(upkeep / 500).toFixed(3)}/request, ${syncs} syncs in all)`,
    );
    expect(upkeep).toBeGreaterThanOrEqual(1);
    expect(upkeep / 500).toBeLessThanOrEqual(0.05);
  });

  test("a due upkeep runs in the background: the request that starts it does not wait for Redis", async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let held = 0;
    const clock = manualClock();
    const t = await createTestApp(
      {},
      {
        clock,
        wrap: (deps) => {
          const redis = new Proxy(deps.redis, {
            get(target, prop) {
              const v = Reflect.get(target, prop, target) as unknown;
              if (prop === "evalsha") {
                return async (...args: unknown[]) => {
                  if (held >= 0) {
                    held++;
                    await gate;
                  }
                  return await (v as (...a: unknown[]) => Promise<unknown>).apply(target, args);
                };
              }
              if (typeof v !== "function") return v;
              return (...args: unknown[]) =>
                (v as (...a: unknown[]) => unknown).apply(prop === "createScript" ? redis : target, args);
            },
          });
          return { ...deps, redis };
        },
      },
    );
    const token = await createSession(t.deps.redis, user(), 600, t.deps.isolate.sessions.keys);
    held = -1; // let the cold sync through
    expect((await me(t, token)).status).toBe(200);
    held = 0;
    clock.advance(2_500);
    expect((await me(t, token)).status).toBe(200);
    expect(held).toBe(1); // the sync's EVALSHA is parked, and the response came anyway
    release();
    await t.settle();
  });

  test("logout revokes: this isolate refuses at once, another isolate within the trust bound", async () => {
    const a = await counted();
    const b = await counted();
    const { token } = await loginAs(a.app, a.deps);
    expect((await me(a, token)).status).toBe(200);
    // Warm the revoke script on this Redis (its first EVALSHA answers NOSCRIPT, then EVAL).
    const spare = await loginAs(a.app, a.deps);
    await call(a.app, "POST", "/api/user/logout", { token: spare.token });
    expect((await me(b, token)).status).toBe(200);
    const c = await counted();
    expect((await me(c, token)).status).toBe(200);

    const before = a.count.session();
    expect((await call(a.app, "POST", "/api/user/logout", { token })).body).toEqual({ success: true });
    expect(a.count.session() - before).toBe(1); // one EVALSHA: DEL + append to the revocation stream
    expect(await a.deps.redis.exists(keys.loginToken(token))).toBe(0);
    expect((await me(a, token)).status).toBe(401);

    // B: within the bound, before its next upkeep, it still answers from memory (documented) …
    expect((await me(b, token)).status).toBe(200);
    // … its next upkeep (due after SESSION_SYNC_MS) carries the revocation: refused from then on.
    b.clock.advance(2_000);
    await me(b, token);
    await b.settle();
    expect((await me(b, token)).status).toBe(401);

    // C stays idle past SESSION_TRUST_MS: its next request waits for a sync and is refused outright.
    c.clock.advance(5_001);
    expect((await me(c, token)).status).toBe(401);
  });

  test("the idle TTL in Redis slides after use, in the background, at most once per renew interval", async () => {
    const t = await counted({ SESSION_TTL_SECONDS: "600", SESSION_RENEW_SECONDS: "60" });
    const token = await createSession(t.deps.redis, user(), 600, t.deps.isolate.sessions.keys);
    await t.deps.redis.expire(keys.loginToken(token), 100);
    // First use in this isolate: confirmed (and renewed) by the sync the cold isolate waits for.
    expect((await me(t, token)).status).toBe(200);
    expect(await t.deps.redis.ttl(keys.loginToken(token))).toBeGreaterThan(590);
    await t.deps.redis.expire(keys.loginToken(token), 100);
    // Used again 30 s later: not due for renewal yet (the upkeep runs, but renews nothing).
    t.clock.advance(30_000);
    await me(t, token);
    await t.settle();
    expect(await t.deps.redis.ttl(keys.loginToken(token))).toBeLessThanOrEqual(100);
    // 61 s after the renewal: this use queues it; the next upkeep renews.
    t.clock.advance(31_000);
    await me(t, token);
    await t.settle();
    expect(await t.deps.redis.ttl(keys.loginToken(token))).toBeGreaterThan(590);
  });

  test("an expired session is refused within the bound: unseen ones after the next upkeep, known ones at their next renewal", async () => {
    const t = await counted({ SESSION_TTL_SECONDS: "600", SESSION_RENEW_SECONDS: "60" });
    const warm = await createSession(t.deps.redis, user(), 600, t.deps.isolate.sessions.keys);
    expect((await me(t, warm)).status).toBe(200);

    // Never seen here, record already gone: accepted on its signature until the next upkeep.
    const gone = await createSession(t.deps.redis, user(), 600, t.deps.isolate.sessions.keys);
    await t.deps.redis.del(keys.loginToken(gone));
    t.clock.advance(2_000);
    await me(t, gone);
    await t.settle();
    expect((await me(t, gone)).status).toBe(401);

    // Known and confirmed, then deleted behind the app's back: noticed at its next renewal.
    await t.deps.redis.del(keys.loginToken(warm));
    t.clock.advance(60_000);
    await me(t, warm);
    await t.settle();
    expect((await me(t, warm)).status).toBe(401);
  });

  test("a legacy 32-hex token still works: one lookup per isolate, then warm; logout revokes it", async () => {
    const t = await counted();
    const u = user();
    const token = [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("");
    await t.deps.redis.hset(keys.loginToken(token), { id: String(u.id), nickName: u.nickName, icon: u.icon });
    await t.deps.redis.expire(keys.loginToken(token), 600);
    const first = t.count.session();
    expect((await me(t, token)).body).toMatchObject({ success: true, data: { id: u.id, nickName: u.nickName } });
    await t.settle();
    expect(t.count.session() - first).toBe(2); // HMGET + the cold isolate's sync
    const warm = t.count.session();
    expect((await me(t, token)).status).toBe(200);
    expect(t.count.session() - warm).toBe(0);
    // An unknown 32-hex token costs one lookup, once: then it is known dead.
    const unknown = "f".repeat(32);
    const u0 = t.count.session();
    expect((await me(t, unknown)).status).toBe(401);
    expect((await me(t, unknown)).status).toBe(401);
    expect(t.count.session() - u0).toBe(1);

    const other = await counted();
    expect((await me(other, token)).status).toBe(200);
    expect((await call(t.app, "POST", "/api/user/logout", { token })).body).toEqual({ success: true });
    expect((await me(t, token)).status).toBe(401);
    other.clock.advance(5_001);
    expect((await me(other, token)).status).toBe(401);
  });
});

describe("unknown legacy tokens are metered per address", () => {
  const junk = () =>
    [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("");

  test("random 32-hex tokens from one address: MISS_PER_ADDRESS lookups per window, then 429 + Retry-After with no Redis command; other addresses and warm sessions are unaffected", async () => {
    const t = await counted({ MISS_PER_ADDRESS: "20", MISS_WINDOW_MS: "60000" });
    // A real legacy session, warm in this isolate before the flood.
    const u = user();
    const legacy = junk();
    await t.deps.redis.hset(keys.loginToken(legacy), { id: String(u.id), nickName: u.nickName, icon: u.icon });
    await t.deps.redis.expire(keys.loginToken(legacy), 600);
    expect((await call(t.app, "GET", "/api/user/me", { token: legacy, ip: "10.11.0.2" })).status).toBe(200);
    await t.settle();

    const before = t.count.session();
    const statuses: number[] = [];
    let retryAfter: string | null = null;
    for (let i = 0; i < 60; i++) {
      const res = await call(t.app, "GET", "/api/user/me", { token: junk(), ip: "10.11.0.1" });
      statuses.push(res.status);
      if (res.status === 429) {
        expect(res.body).toMatchObject({ success: false, code: "RATE_LIMITED" });
        retryAfter = res.headers.get("retry-after");
      }
    }
    expect(statuses).toEqual([...Array<number>(20).fill(401), ...Array<number>(40).fill(429)]);
    expect(Number(retryAfter)).toBeGreaterThan(0);
    // One HMGET per counted miss, none for the refused ones.
    expect(t.count.session() - before).toBe(20);
    // Optional-user routes treat a refused lookup as anonymous, still at no command.
    const hot = await call(t.app, "GET", "/api/blog/hot?current=1", { token: junk(), ip: "10.11.0.1" });
    expect(hot.status).toBe(200);
    expect(t.count.session() - before).toBe(20);
    // Another address still gets its lookup; the warm legacy session works from the flooded address.
    expect((await call(t.app, "GET", "/api/user/me", { token: junk(), ip: "10.11.0.3" })).status).toBe(401);
    expect((await call(t.app, "GET", "/api/user/me", { token: legacy, ip: "10.11.0.1" })).status).toBe(200);
    // The window ends: the address is looked up again.
    t.clock.advance(60_000);
    expect((await call(t.app, "GET", "/api/user/me", { token: junk(), ip: "10.11.0.1" })).status).toBe(401);
  });
});

describe("lua/session-sync.lua and session-revoke.lua", () => {
  test("renew the sessions given, report the missing ones, stream revocations from a cursor, flag a trimmed stream", async () => {
    const t = await createTestApp();
    const s = scriptsFor(t.deps.redis);
    const tag = crypto.randomUUID();
    const k1 = keys.loginToken(`t1-${tag}`);
    const k2 = keys.loginToken(`t2-${tag}`);
    await t.deps.redis.hset(k1, { id: "1" });
    await t.deps.redis.expire(k1, 10);
    const sys = [keys.loginRevoked(), keys.loginRevokedSeq()];
    const [cursor0, , , sids0, missing0] = await s.sessionSync.exec([...sys, k1, k2], ["-1", "300", "1000"]);
    expect(sids0).toEqual([]);
    expect(missing0.map(Number)).toEqual([2]);
    expect(await t.deps.redis.ttl(k1)).toBeGreaterThan(290);

    await s.sessionRevoke.exec([k1, ...sys], [`j:${tag}-a`, "10000"]);
    await s.sessionRevoke.exec([k2, ...sys], [`j:${tag}-b`, "10000"]);
    expect(await t.deps.redis.exists(k1)).toBe(0);
    const [cursor1, truncated1, , sids1] = await s.sessionSync.exec(sys, [String(cursor0), "300", "1"]);
    expect(truncated1).toBe(1);
    expect(sids1).toEqual([`j:${tag}-a`]);
    const [cursor2, truncated2, , sids2] = await s.sessionSync.exec(sys, [String(cursor1), "300", "1000"]);
    expect(truncated2).toBe(0);
    expect(sids2).toContain(`j:${tag}-b`);
    expect(Number(cursor2)).toBeGreaterThan(Number(cursor1));

    // Keep only the newest revocation: a cursor from before is now behind the trimmed stream.
    await s.sessionRevoke.exec([k2, ...sys], [`j:${tag}-c`, "1"]);
    const [, , oldest] = await s.sessionSync.exec(sys, [String(cursor0), "300", "1000"]);
    expect(Number(oldest)).toBeGreaterThan(Number(cursor0) + 1);
  });
});

describe("sessions that end (issue 16 item 2)", () => {
  /** The 3 other spellings of a token's 43-char signature (its last char's two spare bits). */
  function respellings(token: string): string[] {
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const last = alphabet.indexOf(token.at(-1) as string);
    return [1, 2, 3].map((x) => token.slice(0, -1) + alphabet[last ^ x]);
  }

  test("a signature is accepted in its canonical spelling only", async () => {
    const t = await createTestApp();
    const { token } = await loginAs(t.app, t.deps);
    expect((await call(t.app, "GET", "/api/user/me", { token })).status).toBe(200);
    for (const other of respellings(token))
      expect((await call(t.app, "GET", "/api/user/me", { token: other })).status).toBe(401);
    expect(await t.deps.isolate.sessions.keys.verify(respellings(token)[0] as string)).toBeNull();
  });

  test("a logout holds in an isolate flooded with junk tokens (refusals never evict it)", async () => {
    // Misses are not metered here (that has its own test): the flood is 400 lookups from one address.
    const t = await createTestApp({ SESSION_CACHE_MAX: "50", MISS_PER_ADDRESS: "0" });
    const { token } = await loginAs(t.app, t.deps);
    expect((await call(t.app, "GET", "/api/user/me", { token })).status).toBe(200);
    expect((await call(t.app, "POST", "/api/user/logout", { token })).status).toBe(200);
    expect((await call(t.app, "GET", "/api/user/me", { token })).status).toBe(401);
    // 400 random legacy tokens: each a miss in Redis, 8 × the session LRU's size.
    for (let i = 0; i < 400; i++) {
      const junk = [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, "0")).join("");
      expect((await call(t.app, "GET", "/api/user/me", { token: junk })).status).toBe(401);
    }
    // And live sessions beyond the LRU's size.
    for (let i = 0; i < 60; i++) await loginAs(t.app, t.deps);
    for (let i = 0; i < 8; i++) expect((await call(t.app, "GET", "/api/user/me", { token })).status).toBe(401);
    expect((await call(t.app, "POST", "/api/user/sign", { token })).status).toBe(401);
  });

  test("a token revoked on another isolate is refused here once the revocation is read, even if this isolate never held it", async () => {
    const a = await createTestApp();
    const b = await createTestApp();
    const { token } = await loginAs(a.app, a.deps);
    await b.deps.isolate.sessions.sync(b.deps); // b follows the stream
    expect((await call(a.app, "POST", "/api/user/logout", { token })).status).toBe(200);
    await b.deps.isolate.sessions.sync(b.deps);
    expect((await call(b.app, "GET", "/api/user/me", { token })).status).toBe(401);
  });

  test("a token carries an absolute expiry (SESSION_MAX_AGE_SECONDS): past it, refused although its session still slides", async () => {
    const clock = manualClock();
    const t = await createTestApp(
      { SESSION_MAX_AGE_SECONDS: "3600", SESSION_TTL_SECONDS: "7200", SESSION_RENEW_SECONDS: "60" },
      { clock },
    );
    const { token } = await loginAs(t.app, t.deps);
    const payload = JSON.parse(atob((token.split(".")[1] as string).replace(/-/g, "+").replace(/_/g, "/"))) as {
      iat: number;
      exp: number;
    };
    expect(payload.exp - payload.iat).toBe(3600);
    expect((await call(t.app, "GET", "/api/user/me", { token })).status).toBe(200);
    // Used every 20 minutes: the idle timeout never ends it; the absolute lifetime does.
    for (let i = 0; i < 2; i++) {
      clock.advance(20 * 60_000);
      expect((await call(t.app, "GET", "/api/user/me", { token })).status).toBe(200);
    }
    clock.advance(21 * 60_000);
    // The isolate that holds it in memory refuses it too.
    expect((await call(t.app, "GET", "/api/user/me", { token })).status).toBe(401);
    const fresh = await createTestApp({ SESSION_MAX_AGE_SECONDS: "3600" }, { clock });
    expect((await call(fresh.app, "GET", "/api/user/me", { token })).status).toBe(401);
    expect(await t.deps.isolate.sessions.keys.verify(token, clock.now())).toBeNull();
  });
});

describe("token re-issue (issue 16 item 2)", () => {
  type Payload = { sub: string; iat: number; exp: number; jti: string; auth_time: number };
  const payloadOf = (token: string) =>
    JSON.parse(atob((token.split(".")[1] as string).replace(/-/g, "+").replace(/_/g, "/"))) as Payload;
  const MIN = 60_000;
  /** Tokens live 1 h (re-issued in their last 30 min), sessions at most 2 h from sign-in. */
  const SHORT = { SESSION_MAX_AGE_SECONDS: "3600", SESSION_HARD_CAP_SECONDS: "7200" };

  test("a request within half the lifetime of exp gets a fresh token (same session, later exp) for one EXPIRE; it works, and the old one works until its own exp", async () => {
    const t = await counted(SHORT);
    const { token } = await loginAs(t.app, t.deps);
    const old = payloadOf(token);
    t.clock.advance(31 * MIN);
    await t.deps.isolate.sessions.sync(t.deps); // within the trust bound again, so the count below is the re-issue alone
    await t.deps.redis.expire(keys.loginToken(token), 100);
    const before = t.count.session();
    const r = await me(t, token);
    expect(r.status).toBe(200);
    const fresh = r.headers.get("x-session-token");
    expect(fresh).toBeTruthy();
    expect(t.count.session() - before).toBe(1); // the EXPIRE that proves the record and slides it
    expect(r.headers.get("cache-control")).toBe("no-store");
    const next = payloadOf(fresh as string);
    expect(next.jti).toBe(old.jti);
    expect(next.sub).toBe(old.sub);
    expect(next.auth_time).toBe(old.iat);
    expect(next.exp).toBe(next.iat + 3600);
    expect(next.exp).toBeGreaterThan(old.exp);
    // Same record, its idle timeout re-armed; signature canonical (the other spellings are refused).
    expect(keys.loginToken(fresh as string)).toBe(keys.loginToken(token));
    expect(await t.deps.redis.ttl(keys.loginToken(token))).toBeGreaterThan(1700);
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    const last = alphabet.indexOf((fresh as string).at(-1) as string);
    for (const x of [1, 2, 3])
      expect(
        await t.deps.isolate.sessions.keys.verify((fresh as string).slice(0, -1) + alphabet[last ^ x], t.clock.now()),
      ).toBeNull();

    // The fresh token works here (no header: it is far from its exp) and in an isolate that never saw it.
    const again = await me(t, fresh as string);
    expect(again.body).toMatchObject({ success: true, data: { id: Number(old.sub) } });
    expect(again.headers.get("x-session-token")).toBeNull();
    const other = await counted(SHORT, manualClock(t.clock.now()));
    expect((await me(other, fresh as string)).status).toBe(200);
    // A client that kept the old token is handed the same fresh token again, without another write.
    const mid = t.count.session();
    expect((await me(t, token)).headers.get("x-session-token")).toBe(fresh);
    expect(t.count.session() - mid).toBe(0);

    // Past the old token's exp: it is refused, the fresh one still works.
    t.clock.advance(30 * MIN);
    await t.deps.isolate.sessions.sync(t.deps);
    expect((await me(t, token)).status).toBe(401);
    expect((await me(t, fresh as string)).status).toBe(200);
  });

  test("a request far from exp gets no header and no Redis command; past the threshold it does", async () => {
    const t = await counted(SHORT);
    const { token } = await loginAs(t.app, t.deps);
    await t.deps.isolate.sessions.sync(t.deps);
    const before = t.count.session();
    for (let i = 0; i < 20; i++) {
      const r = await me(t, token);
      expect(r.status).toBe(200);
      expect(r.headers.get("x-session-token")).toBeNull();
    }
    expect(t.count.session() - before).toBe(0);
    // 1 s before the threshold (30 min before exp): still none; 2 s later: one.
    t.clock.advance(30 * MIN - 1_000);
    await t.deps.isolate.sessions.sync(t.deps);
    const edge = t.count.session();
    expect((await me(t, token)).headers.get("x-session-token")).toBeNull();
    expect(t.count.session() - edge).toBe(0);
    t.clock.advance(2_000);
    expect((await me(t, token)).headers.get("x-session-token")).toBeTruthy();
  });

  test("a logged-out session is never re-issued: not on its logout, not by an isolate that has not read the logout yet, and a logout with either token ends both", async () => {
    const a = await counted(SHORT);
    const { token } = await loginAs(a.app, a.deps);
    const b = await counted(SHORT, manualClock(a.clock.now()));
    expect((await me(b, token)).status).toBe(200); // b holds the session in memory
    a.clock.advance(31 * MIN);
    b.clock.advance(31 * MIN);
    await b.deps.isolate.sessions.sync(b.deps);

    // The logout request itself, near exp, carries no fresh token.
    const out = await call(a.app, "POST", "/api/user/logout", { token });
    expect(out.body).toEqual({ success: true });
    expect(out.headers.get("x-session-token")).toBeNull();
    expect((await me(a, token)).status).toBe(401);
    // b has not synced since the logout (within its trust bound it would still answer from memory),
    // but the re-issue's EXPIRE finds the record gone: refused, no token, and dead there from now on.
    const r = await me(b, token);
    expect(r.status).toBe(401);
    expect(r.headers.get("x-session-token")).toBeNull();
    expect((await me(b, token)).status).toBe(401);

    // Re-issued first, then logged out with the new token: the old one ends too, here and elsewhere.
    const second = await loginAs(a.app, a.deps);
    expect((await me(b, second.token)).status).toBe(200);
    a.clock.advance(31 * MIN);
    b.clock.advance(31 * MIN);
    await a.deps.isolate.sessions.sync(a.deps);
    const fresh = (await me(a, second.token)).headers.get("x-session-token") as string;
    expect(fresh).toBeTruthy();
    expect((await me(b, fresh)).status).toBe(200); // b now holds both tokens of the session
    expect((await call(a.app, "POST", "/api/user/logout", { token: fresh })).status).toBe(200);
    expect((await me(a, second.token)).status).toBe(401);
    expect((await me(a, fresh)).status).toBe(401);
    await b.deps.isolate.sessions.sync(b.deps);
    expect((await me(b, second.token)).status).toBe(401);
    expect((await me(b, fresh)).status).toBe(401);
  });

  test("re-issue never extends a session past SESSION_HARD_CAP_SECONDS from its sign-in", async () => {
    const t = await counted(SHORT);
    const { token } = await loginAs(t.app, t.deps);
    const signIn = payloadOf(token).iat;
    const step = async (minutes: number, tok: string) => {
      t.clock.advance(minutes * MIN);
      await t.deps.isolate.sessions.sync(t.deps);
      const r = await me(t, tok);
      return { status: r.status, fresh: r.headers.get("x-session-token") };
    };
    // T+31 min: exp T+91; T+62: exp capped at T+120 (not T+122).
    const first = await step(31, token);
    expect(first.status).toBe(200);
    expect(payloadOf(first.fresh as string).exp).toBe(signIn + 91 * 60);
    const second = await step(31, first.fresh as string);
    const capped = payloadOf(second.fresh as string);
    expect(capped.exp).toBe(signIn + 7200);
    expect(capped.auth_time).toBe(signIn);
    // Lowering the cap ends older sessions too: an isolate configured with a 1 h cap refuses it now.
    const stricter = await counted(
      { SESSION_MAX_AGE_SECONDS: "3600", SESSION_HARD_CAP_SECONDS: "3600" },
      manualClock(t.clock.now()),
    );
    expect((await me(stricter, second.fresh as string)).status).toBe(401);
    // T+92: within 30 min of exp, but exp is the cap: no fresh token (and none asked for: no command).
    t.clock.advance(30 * MIN);
    await t.deps.isolate.sessions.sync(t.deps);
    const before = t.count.session();
    const late = await me(t, second.fresh as string);
    expect(late.status).toBe(200);
    expect(late.headers.get("x-session-token")).toBeNull();
    expect(t.count.session() - before).toBe(0);
    // T+120: over, for every token of the session.
    t.clock.advance(28 * MIN);
    await t.deps.isolate.sessions.sync(t.deps);
    for (const tok of [token, first.fresh as string, second.fresh as string])
      expect((await me(t, tok)).status).toBe(401);
    // A cap below the token lifetime is refused at boot.
    expect(() =>
      parseEnv({ ...t.stack.env, SESSION_MAX_AGE_SECONDS: "3600", SESSION_HARD_CAP_SECONDS: "1800" }),
    ).toThrow(/SESSION_HARD_CAP_SECONDS/);
  });
});

/**
 * The Upstash-REST stand-in, driven by the unmodified official SDKs (`@upstash/redis`,
 * `@upstash/ratelimit`) and, where the wire format itself is the point, by raw fetch.
 * A private redis-server and the stand-in run on free ports for this file only.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { createHash, randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Ratelimit } from "@upstash/ratelimit";
import { errors, Redis } from "@upstash/redis";
import { startRedis, type Engine } from "../../scripts/stack/engines.ts";
import { startUpstashRest, type UpstashRestServer } from "../../scripts/stack/upstash-rest.ts";

process.env.UPSTASH_DISABLE_TELEMETRY = "1";

const TOKEN = "test-token-upstash-rest";
let dir: string;
let redisEngine: Engine;
let standin: UpstashRestServer;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "upstash-rest-test-"));
  redisEngine = await startRedis({ dir });
  standin = await startUpstashRest({ redisHost: redisEngine.host, redisPort: redisEngine.port, token: TOKEN });
});

afterAll(async () => {
  await standin?.stop();
  await redisEngine?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** An SDK client on the stand-in; no retries so failures surface at once. */
function sdk(opts: { enableAutoPipelining?: boolean; responseEncoding?: false; token?: string } = {}): Redis {
  return new Redis({ url: standin.url, token: opts.token ?? TOKEN, retry: false, ...opts });
}

/** A key prefix no other test uses. */
function prefix(name: string): string {
  return `test:${name}:${randomUUID()}`;
}

/** Raw HTTP against the stand-in, for wire-level assertions. */
async function post(
  path: string,
  body: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: unknown; text: string; sync: string | null }> {
  const res = await fetch(standin.url + path, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", ...headers },
    body,
  });
  const text = await res.text();
  return { status: res.status, json: JSON.parse(text) as unknown, text, sync: res.headers.get("upstash-sync-token") };
}

const B64 = { "upstash-encoding": "base64" };
const sha1 = (s: string): string => createHash("sha1").update(s, "utf8").digest("hex");

test("single commands go to POST / when auto-pipelining is off", async () => {
  const redis = sdk({ enableAutoPipelining: false });
  const k = prefix("single");
  standin.resetStats();
  expect(await redis.set(`${k}:a`, "hello", { ex: 60 })).toBe("OK");
  expect(await redis.get<string>(`${k}:a`)).toBe("hello");
  expect(await redis.incr(`${k}:n`)).toBe(1);
  expect(await redis.incrby(`${k}:n`, 41)).toBe(42);
  expect(await redis.ttl(`${k}:a`)).toBeGreaterThan(0);
  expect(await redis.del(`${k}:a`, `${k}:n`)).toBe(2);
  expect(await redis.ping()).toBe("PONG");
  const stats = standin.stats();
  expect(stats.byPath).toEqual({ "/": 7 });
  expect(stats.requests).toBe(7);
  expect(stats.commands).toBe(7);
});

test("explicit pipeline().exec() is one POST /pipeline with results in order", async () => {
  const redis = sdk({ enableAutoPipelining: false });
  const k = prefix("pipe");
  standin.resetStats();
  const res = await redis.pipeline().set(k, "v1").incr(`${k}:n`).get(k).incr(`${k}:n`).exec();
  expect(res).toEqual(["OK", 1, "v1", 2]);
  expect(standin.stats()).toMatchObject({ requests: 1, commands: 4, byPath: { "/pipeline": 1 }, throttledRequests: 0 });
});

test("500 concurrent INCRs with auto-pipelining count exactly and are batched", async () => {
  const redis = sdk();
  const k = prefix("auto");
  standin.resetStats();
  const results = await Promise.all(Array.from({ length: 500 }, () => redis.incr(k)));
  expect(new Set(results).size).toBe(500);
  expect(Math.max(...results)).toBe(500);
  expect(await redis.get<number>(k)).toBe(500);
  const stats = standin.stats();
  expect(stats.commands).toBe(501);
  expect(stats.requests).toBeLessThan(20);
  expect(stats.byPath["/pipeline"]).toBe(stats.requests);
});

test("the stats endpoint reports requests and commands and can be reset over HTTP", async () => {
  const auth = { authorization: `Bearer ${TOKEN}` };
  expect((await fetch(`${standin.url}/__standin/stats/reset`, { method: "POST", headers: auth })).status).toBe(200);
  await sdk({ enableAutoPipelining: false }).pipeline().ping().ping().exec();
  const res = await fetch(`${standin.url}/__standin/stats`, { headers: auth });
  expect(res.status).toBe(200);
  expect(await res.json()).toEqual({
    requests: 1,
    commands: 2,
    byPath: { "/pipeline": 1 },
    throttledRequests: 0,
    throttledCommands: 0,
    maxPerSecond: 2,
    maxOfferedPerSecond: 2,
    syncWaits: 0,
    syncTimeouts: 0,
  });
  expect((await fetch(`${standin.url}/__standin/stats`)).status).toBe(401);
});

test("multi().exec() applies the other commands when one fails inside EXEC", async () => {
  const redis = sdk();
  const k = prefix("multi");
  await redis.set(`${k}:str`, "not a number");
  standin.resetStats();
  const res = await redis.multi().set(`${k}:a`, 1).incr(`${k}:str`).incr(`${k}:a`).exec({ keepErrors: true });
  expect(standin.stats().byPath).toEqual({ "/multi-exec": 1 });
  expect(res.map((r) => r.error)).toEqual([
    undefined,
    expect.stringContaining("ERR value is not an integer"),
    undefined,
  ]);
  expect(res[0]?.result).toBe("OK");
  expect(res[2]?.result).toBe(2);
  expect(await redis.get<number>(`${k}:a`)).toBe(2);
  // Without keepErrors the SDK throws, but the transaction has still been applied.
  await expect(redis.multi().incr(`${k}:a`).incr(`${k}:str`).exec()).rejects.toThrow(/Command 2 \[ incr \] failed/);
  expect(await redis.get<number>(`${k}:a`)).toBe(3);
});

test("a transaction discarded while queueing is a 400 with one error and changes nothing", async () => {
  const k = prefix("execabort");
  const res = await post(
    "/multi-exec",
    JSON.stringify([
      ["SET", k, "1"],
      ["NOSUCHCOMMAND", k],
    ]),
  );
  expect(res.status).toBe(400);
  expect(res.json).toEqual({ error: expect.stringContaining("EXECABORT") });
  expect((await post("/", JSON.stringify(["EXISTS", k]))).json).toEqual({ result: 0 });
  // Commands that would break the dedicated connection's transaction are refused up front.
  const nested = await post("/multi-exec", JSON.stringify([["SET", k, "1"], ["EXEC"]]));
  expect(nested.status).toBe(400);
  expect((await post("/", JSON.stringify(["EXISTS", k]))).json).toEqual({ result: 0 });
});

test("UTF-8 and binary strings round-trip, with and without base64", async () => {
  const k = prefix("utf8");
  const text = "héllo 🌍 中文 — ∑";
  for (const redis of [sdk(), sdk({ responseEncoding: false })]) {
    await redis.set(`${k}:text`, text);
    expect(await redis.get<string>(`${k}:text`)).toBe(text);
    await redis.set(`${k}:bin`, "\u0000\u00ff");
    expect(await redis.get<string>(`${k}:bin`)).toBe("\u0000\u00ff");
    expect(await redis.strlen(`${k}:bin`)).toBe(3); // 00 C3 BF: UTF-8 of the JS string
    expect(await redis.hgetall(`${k}:none`)).toBeNull();
    await redis.hset(`${k}:h`, { 键: "值🎉" });
    expect(await redis.hgetall(`${k}:h`)).toEqual({ 键: "值🎉" });
  }
  // Raw bytes that are not UTF-8 (00 FF 01) are base64 of the exact bytes on the wire.
  await post("/", JSON.stringify(["EVAL", "return redis.call('SET', KEYS[1], '\\0\\255\\1')", 1, `${k}:raw`]));
  const raw = await post("/", JSON.stringify(["GET", `${k}:raw`]), B64);
  expect(raw.json).toEqual({ result: Buffer.from([0, 255, 1]).toString("base64") });
  // Without base64, invalid UTF-8 becomes U+FFFD, as Upstash does.
  expect((await post("/", JSON.stringify(["GET", `${k}:raw`]))).json).toEqual({ result: "\u0000\ufffd\u0001" });
  expect(await sdk().get<string>(`${k}:raw`)).toBe("\u0000\ufffd\u0001");
  expect(await sdk().strlen(`${k}:raw`)).toBe(3);
});

test("base64 encodes every string except the status OK; integers and nil are plain JSON", async () => {
  const k = prefix("wire");
  expect((await post("/", JSON.stringify(["SET", k, "OK"]), B64)).text).toBe('{"result":"OK"}');
  expect((await post("/", JSON.stringify(["GET", k]), B64)).text).toBe('{"result":"T0s="}'); // a bulk "OK"
  expect((await post("/", JSON.stringify(["PING"]), B64)).text).toBe('{"result":"UE9ORw=="}');
  expect((await post("/", JSON.stringify(["TYPE", k]), B64)).text).toBe('{"result":"c3RyaW5n"}');
  expect((await post("/", JSON.stringify(["GET", `${k}:missing`]), B64)).text).toBe('{"result":null}');
  const nested = await post("/", JSON.stringify(["EVAL", "return {1,{2,'x',{}},'y'}", 0]), B64);
  expect(nested.text).toBe('{"result":[1,[2,"eA==",[]],"eQ=="]}');
  const pipe = await post(
    "/pipeline",
    JSON.stringify([
      ["GET", `${k}:missing`],
      ["INCR", k],
      ["EXISTS", k],
    ]),
    B64,
  );
  expect(pipe.text).toBe('[{"result":null},{"error":"ERR value is not an integer or out of range"},{"result":1}]');
  // 64-bit integers keep every digit.
  expect((await post("/", JSON.stringify(["INCRBY", `${k}:big`, "9007199254740993"]))).text).toBe(
    '{"result":9007199254740993}',
  );
  // Arguments may be numbers and booleans; command names any case.
  expect((await post("/", JSON.stringify(["set", `${k}:b`, true]))).status).toBe(200);
  expect((await post("/", JSON.stringify(["gEt", `${k}:b`]))).json).toEqual({ result: "true" });
  expect((await post("/", JSON.stringify(["SET", `${k}:f`, 1.5]))).status).toBe(200);
  expect((await post("/", JSON.stringify(["INCRBYFLOAT", `${k}:f`, 1]), B64)).json).toEqual({
    result: Buffer.from("2.5").toString("base64"),
  });
});

test("nil, integers and nested arrays reach the SDK intact", async () => {
  const redis = sdk();
  const k = prefix("nested");
  expect(await redis.get(`${k}:missing`)).toBeNull();
  expect(await redis.eval("return {1,{2,'x'},nil,4}", [], [])).toEqual([1, [2, "x"]]); // Lua stops at nil
  await redis.zadd(`${k}:z`, { score: 1, member: "a" }, { score: 2.5, member: "b" });
  expect(await redis.zrange(`${k}:z`, 0, -1, { withScores: true })).toEqual(["a", 1, "b", 2.5]);
  const id = await redis.xadd(`${k}:s`, "*", { field: "value", n: "1" });
  expect(await redis.xrange(`${k}:s`, "-", "+")).toEqual({ [id]: { field: "value", n: 1 } });
  const [cursor, keys] = await redis.scan(0, { match: `${k}:*`, count: 1000 });
  expect(typeof cursor).toBe("string");
  expect(keys.sort()).toEqual([`${k}:s`, `${k}:z`]);
});

test("an error is thrown for a single command and kept per entry in a pipeline", async () => {
  const k = prefix("errors");
  const single = sdk({ enableAutoPipelining: false });
  await single.set(k, "text");
  const err = await single.incr(k).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(errors.UpstashError);
  expect((err as Error).message).toContain("ERR value is not an integer or out of range");

  const kept = await single.pipeline().set(`${k}:x`, "x").incr(k).get(`${k}:x`).exec({ keepErrors: true });
  expect(kept.map((r) => [r.error, r.result])).toEqual([
    [undefined, "OK"],
    [expect.stringContaining("ERR value is not an integer"), undefined],
    [undefined, "x"],
  ]);
  await expect(single.pipeline().get(k).incr(k).exec()).rejects.toThrow(/Command 2 \[ incr \] failed/);

  // Auto-pipelined: the failing command rejects alone; its batch-mates succeed.
  const auto = sdk();
  const [a, b, c] = await Promise.allSettled([auto.get(k), auto.incr(k), auto.exists(k)]);
  expect(a).toEqual({ status: "fulfilled", value: "text" });
  expect(b.status).toBe("rejected");
  expect(c).toEqual({ status: "fulfilled", value: 1 });
});

test("createScript().exec falls back from EVALSHA to EVAL once, then uses EVALSHA", async () => {
  const redis = sdk({ enableAutoPipelining: false });
  const k = prefix("script");
  const src = `-- ${randomUUID()}\nreturn {KEYS[1], ARGV[1], redis.call('INCR', KEYS[1])}`;
  const script = redis.createScript<[string, string, number]>(src);
  expect(await redis.scriptExists(sha1(src))).toEqual([0]);
  standin.resetStats();
  expect(await script.exec([k], ["arg"])).toEqual([k, "arg", 1]);
  expect(standin.stats().requests).toBe(2); // EVALSHA → NOSCRIPT, then EVAL
  expect(await redis.scriptExists(sha1(src))).toEqual([1]);
  standin.resetStats();
  expect(await script.exec([k], ["arg"])).toEqual([k, "arg", 2]);
  expect(standin.stats().requests).toBe(1); // EVALSHA only
  // NOSCRIPT reaches the client verbatim.
  const res = await post("/", JSON.stringify(["EVALSHA", sha1(`${src}x`), 0]));
  expect(res).toMatchObject({ status: 400, json: { error: "NOSCRIPT No matching script. Please use EVAL." } });
});

test("a #!lua flags=allow-key-locking script runs under the SHA-1 of its original text", async () => {
  const redis = sdk();
  const k = prefix("shebang");
  const src = `#!lua flags=allow-key-locking\n-- ${randomUUID()}\nreturn redis.call('INCR', KEYS[1])`;
  expect(await redis.scriptLoad(src)).toBe(sha1(src));
  expect(await redis.scriptExists(sha1(src), "0".repeat(40))).toEqual([1, 0]);
  expect(await redis.evalsha(sha1(src), [k], [])).toBe(1);
  expect(await redis.eval(src, [k], [])).toBe(2);
  // Read-only variants too; known Redis 7 flags are kept.
  const ro = `#!lua flags=allow-key-locking,no-writes\n-- ${randomUUID()}\nreturn redis.call('GET', KEYS[1])`;
  expect(await redis.evalRo(ro, [k], [])).toBe(2);
  expect(await redis.evalshaRo(sha1(ro), [k], [])).toBe(2);
  // The blank line keeps Lua line numbers: the failing call is on line 3 of the original.
  await redis.set(`${k}:s`, "x");
  await expect(redis.evalsha(sha1(src), [`${k}:s`], [])).rejects.toThrow(/user_script:3/);
  // The script is unknown after SCRIPT FLUSH through the stand-in, as on Upstash.
  await redis.scriptFlush();
  await expect(redis.evalsha(sha1(src), [k], [])).rejects.toThrow(/NOSCRIPT/);
});

test("redis down gives a 500 JSON error; after a restart known scripts are loaded back", async () => {
  const redis = sdk();
  const k = prefix("restart");
  const src = `#!lua flags=allow-key-locking\n-- ${randomUUID()}\nreturn redis.call('INCR', KEYS[1])`;
  expect(await redis.scriptLoad(src)).toBe(sha1(src));
  const port = redisEngine.port;
  await redisEngine.stop();
  const down = await post("/", JSON.stringify(["PING"]));
  expect(down.status).toBe(500);
  expect(down.json).toEqual({ error: expect.stringContaining("redis") });
  await expect(redis.get(k)).rejects.toThrow(errors.UpstashError);
  redisEngine = await startRedis({ dir, port });
  // The restarted redis has an empty script cache; the stand-in loads the script again.
  expect(await redis.evalsha(sha1(src), [k], [])).toBe(1);
  expect(await redis.evalsha(sha1(src), [k], [])).toBe(2);
});

test("large values and long replies survive being split across many TCP reads", async () => {
  const redis = sdk();
  const k = prefix("large");
  const big = "🌍abc".repeat(400_000); // 2.8 MB of UTF-8
  await redis.set(k, big);
  const [got, len] = await Promise.all([redis.get<string>(k), redis.strlen(k)]);
  expect(got === big).toBe(true);
  expect(len).toBe(Buffer.byteLength(big));
  const items = Array.from({ length: 20_000 }, (_, i) => `item-${i}-${"x".repeat(i % 50)}`);
  for (let i = 0; i < items.length; i += 5000) await redis.rpush(`${k}:list`, ...items.slice(i, i + 5000));
  expect(await redis.lrange(`${k}:list`, 0, -1)).toEqual(items);
});

test("a request redis does not answer in time fails with a 500 instead of hanging", async () => {
  const impatient = await startUpstashRest({
    redisHost: redisEngine.host,
    redisPort: redisEngine.port,
    token: TOKEN,
    commandTimeoutMs: 100,
  });
  try {
    // A Lua busy loop keeps redis from answering anyone for ~600 ms.
    const busy =
      "local t = redis.call('TIME'); local s = t[1] * 1e6 + t[2]; " +
      "repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - s > 600000; return 1";
    const call = (cmd: unknown[]) =>
      fetch(impatient.url, {
        method: "POST",
        headers: { authorization: `Bearer ${TOKEN}` },
        body: JSON.stringify(cmd),
      });
    const t0 = performance.now();
    const res = await call(["EVAL", busy, 0]);
    expect(res.status).toBe(500);
    expect(await res.json()).toEqual({ error: expect.stringContaining("did not answer") });
    expect(performance.now() - t0).toBeLessThan(500);
    // Once redis is free again the stand-in reconnects and answers.
    let ok: Response;
    do ok = await call(["PING"]);
    while (ok.status === 500 && performance.now() - t0 < 5000);
    expect(await ok.json()).toEqual({ result: "PONG" });
  } finally {
    await impatient.stop();
  }
});

test("a blocking command does not stall other traffic", async () => {
  const k = prefix("blocking");
  const redis = sdk();
  const blpop = post("/", JSON.stringify(["BLPOP", k, 5]));
  await Bun.sleep(20);
  const t0 = performance.now();
  expect(await redis.get(`${k}:other`)).toBeNull();
  expect(performance.now() - t0).toBeLessThan(500);
  await redis.lpush(k, "item");
  expect((await blpop).json).toEqual({ result: [k, "item"] });
});

test("commands that would break the shared connection are refused", async () => {
  for (const cmd of [["SUBSCRIBE", "c"], ["SELECT", "1"], ["MULTI"], ["CLIENT", "REPLY", "OFF"]]) {
    const res = await post("/", JSON.stringify(cmd));
    expect(res.status).toBe(400);
    expect(res.json).toEqual({ error: expect.stringContaining("not available") });
  }
  expect((await post("/", JSON.stringify(["PING"]))).json).toEqual({ result: "PONG" });
});

test("auth: a wrong or missing token is a 401 JSON error", async () => {
  const wrong = await post("/", '["PING"]', { authorization: "Bearer nope" });
  expect(wrong).toMatchObject({ status: 401, json: { error: "Unauthorized" } });
  const missing = await fetch(standin.url, { method: "POST", body: '["PING"]' });
  expect(missing.status).toBe(401);
  expect(await missing.json()).toEqual({ error: "Unauthorized" });
  const malformed = await post("/pipeline", '[["PING"]]', { authorization: TOKEN });
  expect(malformed.status).toBe(401);
  await expect(sdk({ token: "nope", enableAutoPipelining: false }).ping()).rejects.toThrow(/Unauthorized/);
});

test("malformed bodies are 400 JSON errors and unknown paths 404", async () => {
  for (const [path, body] of [
    ["/", "not json"],
    ["/", '{"cmd":"GET"}'],
    ["/", "[]"],
    ["/", '["GET",{"k":1}]'],
    ["/", '["SET","k",null]'],
    ["/pipeline", '["GET","k"]'],
    ["/pipeline", '[["GET","k"],"x"]'],
    ["/multi-exec", '{"a":1}'],
  ] as const) {
    const res = await post(path, body);
    expect({ path, body, status: res.status }).toEqual({ path, body, status: 400 });
    expect(res.json).toEqual({ error: expect.any(String) });
  }
  const notFound = await post("/nope", "[]");
  expect(notFound).toMatchObject({ status: 404, json: { error: expect.any(String) } });
  const welcome = await fetch(standin.url);
  expect(welcome.status).toBe(200);
});

test("the sync token accepts an empty value and increases on every response", async () => {
  const tokens: number[] = [];
  for (let i = 0; i < 4; i++) {
    const res = await post(i % 2 ? "/pipeline" : "/", i % 2 ? '[["PING"]]' : '["PING"]', {
      "upstash-sync-token": i === 0 ? "" : String(tokens[i - 1]),
    });
    expect(res.status).toBe(200);
    tokens.push(Number(res.sync));
  }
  for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
  // The SDK (read-your-writes on by default) starts with an empty token and keeps working.
  const redis = sdk();
  const k = prefix("sync");
  await redis.set(k, "1");
  expect(await redis.get<number>(k)).toBe(1);
});

async function attack(limiter: Ratelimit, id: string, n = 200): Promise<number> {
  const results = await Promise.all(Array.from({ length: n }, () => limiter.limit(id)));
  expect(results.every((r) => r.reason === undefined)).toBe(true); // no "timeout" passes
  return results.filter((r) => r.success).length;
}

test("ratelimit fixedWindow admits exactly its limit under 200 concurrent calls", async () => {
  const limiter = new Ratelimit({
    redis: sdk(),
    limiter: Ratelimit.fixedWindow(10, "10 s"),
    prefix: prefix("rl-fixed"),
    ephemeralCache: false,
    timeout: 0,
  });
  expect(await attack(limiter, "user-1")).toBe(10);
  expect((await limiter.limit("user-2")).success).toBe(true);
});

test("ratelimit slidingWindow admits exactly its limit under 200 concurrent calls", async () => {
  const limiter = new Ratelimit({
    redis: sdk(),
    limiter: Ratelimit.slidingWindow(10, "10 s"),
    prefix: prefix("rl-sliding"),
    ephemeralCache: false,
    timeout: 0,
  });
  expect(await attack(limiter, "user-1")).toBe(10);
});

test("ratelimit tokenBucket admits exactly its bucket under 200 concurrent calls", async () => {
  const limiter = new Ratelimit({
    redis: sdk(),
    limiter: Ratelimit.tokenBucket(10, "60 s", 10),
    prefix: prefix("rl-bucket"),
    ephemeralCache: false,
    timeout: 0,
  });
  expect(await attack(limiter, "user-1")).toBe(10);
});

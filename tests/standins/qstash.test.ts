/**
 * The local QStash stand-in (scripts/stack/qstash/) driven by the unmodified @upstash/qstash SDK,
 * with its state in a private redis-server and real HTTP destinations on loopback.
 *
 * Time runs at 1/100 (timeScale 0.01): `delay: 100` is ~1 s, the default backoff before retry n is
 * e^(2.5n)·10 ms (≈0.12 s, 1.5 s). Every wait is bounded by `waitFor`.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RedisClient } from "bun";
import { Client, QstashError, Receiver } from "@upstash/qstash";
import { SignJWT } from "jose";
import { startRedis, type Engine } from "../../scripts/stack/engines.ts";
import { compileRetryDelay, startLocalQstash, type LocalQstashServer } from "../../scripts/stack/qstash/index.ts";

const TOKEN = "local-qstash-test-token";
const CURRENT = "sig_currentKeyForTests0001";
const NEXT = "sig_nextKeyForTests00000002";
const SCALE = 0.01;

interface Delivery {
  path: string;
  method: string;
  headers: Headers;
  body: string;
  at: number;
}

let dir: string;
let redis: Engine;
let qstash: LocalQstashServer;
let client: Client;
let dest: ReturnType<typeof Bun.serve>;
let destUrl: string;
const deliveries: Delivery[] = [];
/** Per-path count of requests seen, used by the flaky/failing endpoints. */
const hits = new Map<string, number>();
/** Paths under /toggle/ answer 500 until they are added here. */
const healed = new Set<string>();

async function waitFor<T>(
  what: string,
  fn: () => T | undefined | Promise<T | undefined>,
  timeoutMs = 6000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await Bun.sleep(15);
  }
}

const deliveredTo = (path: string) => deliveries.filter((d) => d.path === path);
const uniquePath = (kind: string) => `/${kind}/${crypto.randomUUID()}`;

function startQstash(extra: Partial<Parameters<typeof startLocalQstash>[0]> = {}) {
  return startLocalQstash({
    redisHost: redis.host,
    redisPort: redis.port,
    token: TOKEN,
    currentSigningKey: CURRENT,
    nextSigningKey: NEXT,
    timeScale: SCALE,
    pollIntervalMs: 10,
    deliveryTimeoutMs: 5000,
    ...extra,
  });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "qstash-test-"));
  redis = await startRedis({ dir });
  qstash = await startQstash();
  client = new Client({ baseUrl: qstash.url, token: TOKEN, devMode: false, retry: false });
  dest = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      const u = new URL(req.url);
      const path = u.pathname + u.search;
      const body = await req.text();
      deliveries.push({ path, method: req.method, headers: req.headers, body, at: Date.now() });
      const n = (hits.get(path) ?? 0) + 1;
      hits.set(path, n);
      if (u.pathname.startsWith("/flaky/")) return new Response("nope", { status: n <= 2 ? 500 : 200 });
      if (u.pathname.startsWith("/fail/")) return new Response("always broken", { status: 500 });
      if (u.pathname.startsWith("/toggle/")) return new Response("toggle", { status: healed.has(path) ? 200 : 503 });
      if (u.pathname.startsWith("/busy/") && n === 1)
        return new Response("later", { status: 429, headers: { "Retry-After": "50" } });
      if (u.pathname.startsWith("/slow/") && n === 1) await Bun.sleep(800);
      return new Response("ok");
    },
  });
  destUrl = `http://127.0.0.1:${dest.port}`;
});

afterAll(async () => {
  await qstash?.stop();
  await dest?.stop(true);
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("local QStash via @upstash/qstash", () => {
  test("publishJSON delivers method, body, headers and the delivery metadata", async () => {
    // `//` in the path and an encoded query must reach the destination untouched.
    const path = `${uniquePath("ok")}//double?a=1&b=%C3%A9`;
    const res = await client.publishJSON({
      url: destUrl + path,
      body: { hello: "world", n: 1 },
      headers: { "X-Custom-Thing": "yes" },
      method: "PUT",
    });
    expect(res.messageId).toStartWith("msg_");
    const d = await waitFor("delivery", () => deliveredTo(path)[0]);
    expect(d.method).toBe("PUT");
    expect(JSON.parse(d.body)).toEqual({ hello: "world", n: 1 });
    expect(d.headers.get("content-type")).toBe("application/json");
    expect(d.headers.get("x-custom-thing")).toBe("yes");
    expect(d.headers.get("upstash-message-id")).toBe(res.messageId);
    expect(d.headers.get("upstash-retried")).toBe("0");
    expect(d.headers.get("user-agent")).toBe("Upstash-QStash");
    expect(d.headers.get("authorization")).toBeNull();
    expect(d.headers.get("upstash-telemetry-sdk")).toBeNull();
    expect(d.headers.get("upstash-method")).toBeNull();
  });

  test("a delayed message arrives after its (scaled) delay and not before", async () => {
    const path = uniquePath("ok");
    const t0 = Date.now();
    await client.publish({ url: destUrl + path, body: "later", delay: 100 }); // 100 s × 0.01 = 1 s
    await Bun.sleep(700);
    expect(deliveredTo(path)).toHaveLength(0);
    const d = await waitFor("delayed delivery", () => deliveredTo(path)[0], 4000);
    expect(d.at - t0).toBeGreaterThanOrEqual(100 * 1000 * SCALE);
    expect(d.body).toBe("later");
  });

  test("notBefore (absolute, unscaled) is honoured", async () => {
    const path = uniquePath("ok");
    const notBefore = Math.floor(Date.now() / 1000) + 1;
    await client.publish({ url: destUrl + path, body: "nb", notBefore });
    const d = await waitFor("notBefore delivery", () => deliveredTo(path)[0], 4000);
    expect(d.at).toBeGreaterThanOrEqual(notBefore * 1000);
  });

  test("signatures: valid accepted, tampered body and wrong key rejected, key rotation works", async () => {
    const path = uniquePath("ok");
    await client.publish({ url: destUrl + path, body: "signed body ✓" });
    const d = await waitFor("delivery", () => deliveredTo(path)[0]);
    const signature = d.headers.get("upstash-signature");
    expect(signature).toBeString();
    const sig = signature!;

    const receiver = new Receiver({ currentSigningKey: CURRENT, nextSigningKey: NEXT });
    expect(await receiver.verify({ signature: sig, body: d.body })).toBe(true);
    expect(await receiver.verify({ signature: sig, body: d.body, url: destUrl + path })).toBe(true);
    await expect(receiver.verify({ signature: sig, body: `${d.body}x` })).rejects.toThrow(/body hash/);
    await expect(receiver.verify({ signature: sig, body: d.body, url: `${destUrl}/other` })).rejects.toThrow(/subject/);

    // Same claims, signed with a key the receiver does not know.
    const now = Math.floor(Date.now() / 1000);
    const payload = JSON.parse(Buffer.from(sig.split(".")[1]!, "base64url").toString()) as { body: string };
    const forged = await new SignJWT({ body: payload.body })
      .setProtectedHeader({ alg: "HS256", typ: "JWT" })
      .setIssuer("Upstash")
      .setSubject(destUrl + path)
      .setIssuedAt(now)
      .setNotBefore(now)
      .setExpirationTime(now + 300)
      .sign(new TextEncoder().encode("sig_wrongKey000000000000"));
    await expect(receiver.verify({ signature: forged, body: d.body })).rejects.toThrow();

    // Rotation: the receiver's current key is stale but its next key signed the message.
    const rotated = new Receiver({ currentSigningKey: "sig_staleKey0000000000", nextSigningKey: CURRENT });
    expect(await rotated.verify({ signature: sig, body: d.body })).toBe(true);
    const neither = new Receiver({ currentSigningKey: "sig_staleKey0000000000", nextSigningKey: NEXT });
    await expect(neither.verify({ signature: sig, body: d.body })).rejects.toThrow();
  });

  test("a destination failing twice is retried with backoff until it succeeds", async () => {
    const path = uniquePath("flaky");
    const { messageId } = await client.publish({ url: destUrl + path, body: "retry me" });
    await waitFor("third attempt", () => deliveredTo(path).length >= 3 || undefined, 6000);
    const seen = deliveredTo(path);
    expect(seen.map((d) => d.headers.get("upstash-retried"))).toEqual(["0", "1", "2"]);
    expect(seen.every((d) => d.headers.get("upstash-message-id") === messageId)).toBe(true);
    // Default backoff e^(2.5·n) s scaled: ≥ 0.12 s before retry 1, ≥ 1.48 s before retry 2.
    expect(seen[1]!.at - seen[0]!.at).toBeGreaterThanOrEqual(Math.floor(Math.exp(2.5) * 1000 * SCALE));
    expect(seen[2]!.at - seen[1]!.at).toBeGreaterThanOrEqual(Math.floor(Math.exp(5) * 1000 * SCALE));
    // Each attempt is signed afresh (new jti) and verifies.
    const receiver = new Receiver({ currentSigningKey: CURRENT, nextSigningKey: NEXT });
    for (const d of seen)
      expect(await receiver.verify({ signature: d.headers.get("upstash-signature")!, body: d.body })).toBe(true);
    expect(new Set(seen.map((d) => d.headers.get("upstash-signature"))).size).toBe(3);
    await Bun.sleep(150);
    expect(deliveredTo(path)).toHaveLength(3);
    // Delivered messages are gone from the pending set.
    await expect(client.messages.get(messageId)).rejects.toBeInstanceOf(QstashError);
  });

  test("a custom retry-delay expression and Retry-After are honoured", async () => {
    const fn = compileRetryDelay(
      "max(10, pow(2, retried) * 1000 - sqrt(16) + abs(-1) * floor(1.5) / ceil(0.5) + round(0.4) + exp(0) - 1 + min(1, 2) - 1)",
    );
    expect(fn(0)).toBe(997);
    expect(fn(3)).toBe(7997);
    expect(() => compileRetryDelay("process.exit(1)")).toThrow();
    expect(() => compileRetryDelay("pow(2)")).toThrow();
    expect(() => compileRetryDelay("1 +")).toThrow();

    const path = uniquePath("flaky");
    await client.publish({ url: destUrl + path, body: "x", retryDelay: "5000" }); // 5 s × 0.01 = 50 ms
    await waitFor("third attempt", () => deliveredTo(path).length >= 3 || undefined, 3000);
    const seen = deliveredTo(path);
    expect(seen[1]!.at - seen[0]!.at).toBeGreaterThanOrEqual(50);
    expect(seen[1]!.at - seen[0]!.at).toBeLessThan(1000); // not the default 1.48 s for retry 2
    expect(seen[2]!.at - seen[1]!.at).toBeLessThan(1000);
  });

  test("Retry-After from the destination overrides the backoff; Upstash-Timeout aborts slow attempts", async () => {
    const path = uniquePath("busy");
    await client.publish({ url: destUrl + path, body: "x" });
    await waitFor("second attempt", () => deliveredTo(path)[1], 3000);
    const [a, b] = deliveredTo(path);
    // Retry-After: 50 s × 0.01 = 0.5 s, far above the default first backoff of ~0.12 s.
    expect(b!.at - a!.at).toBeGreaterThanOrEqual(500);

    const slow = uniquePath("slow");
    const r = await fetch(`${qstash.url}/v2/publish/${destUrl}${slow}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${TOKEN}`, "Upstash-Timeout": "150ms", "Upstash-Retry-Delay": "0" },
      body: "slow",
    });
    expect(r.status).toBe(200);
    await waitFor("retry after the timeout", () => deliveredTo(slow)[1], 3000);
    expect(deliveredTo(slow)[1]!.headers.get("upstash-retried")).toBe("1");
    expect(deliveredTo(slow)[1]!.at - deliveredTo(slow)[0]!.at).toBeLessThan(700);
  });

  test("callback and failure callback are signed POSTs describing the outcome", async () => {
    const okPath = uniquePath("ok");
    const failPath = uniquePath("fail");
    const cbPath = uniquePath("ok");
    const fcbPath = uniquePath("ok");
    const ok = await client.publish({
      url: destUrl + okPath,
      body: "src",
      callback: destUrl + cbPath,
      failureCallback: destUrl + fcbPath,
    });
    const bad = await client.publish({
      url: destUrl + failPath,
      body: "src2",
      retries: 0,
      callback: destUrl + cbPath,
      failureCallback: destUrl + fcbPath,
    });
    const cb = await waitFor("callback", () => deliveredTo(cbPath)[0]);
    const fcb = await waitFor("failure callback", () => deliveredTo(fcbPath)[0]);
    const receiver = new Receiver({ currentSigningKey: CURRENT, nextSigningKey: NEXT });
    expect(
      await receiver.verify({ signature: cb.headers.get("upstash-signature")!, body: cb.body, url: destUrl + cbPath }),
    ).toBe(true);
    const cbBody = JSON.parse(cb.body) as Record<string, unknown>;
    expect(cbBody).toMatchObject({
      status: 200,
      sourceMessageId: ok.messageId,
      url: destUrl + okPath,
      body: btoa("ok"),
      sourceBody: btoa("src"),
    });
    const fcbBody = JSON.parse(fcb.body) as Record<string, unknown>;
    expect(fcbBody).toMatchObject({
      status: 500,
      sourceMessageId: bad.messageId,
      body: btoa("always broken"),
      maxRetries: 0,
    });
    expect(fcbBody.dlqId).toBeString();
    await Bun.sleep(100);
    expect(deliveredTo(cbPath)).toHaveLength(1);
    expect(deliveredTo(fcbPath)).toHaveLength(1);
  });

  test("a duplicate deduplication id is delivered once and answered 202 deduplicated", async () => {
    const path = uniquePath("ok");
    const first = await client.publish({ url: destUrl + path, body: "one", deduplicationId: "dedup-1" });
    const second = await client.publish({ url: destUrl + path, body: "two", deduplicationId: "dedup-1" });
    expect((second as { deduplicated?: boolean }).deduplicated).toBe(true);
    expect(second.messageId).toBe(first.messageId);
    const raw = await fetch(`${qstash.url}/v2/publish/${destUrl}${path}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${TOKEN}`, "Upstash-Deduplication-Id": "dedup-1" },
      body: "three",
    });
    expect(raw.status).toBe(202);
    expect(await raw.json()).toMatchObject({ messageId: first.messageId, deduplicated: true });

    // Content-based: same body twice is one delivery, a different body is another.
    const cpath = uniquePath("ok");
    const c1 = await client.publish({ url: destUrl + cpath, body: "same", contentBasedDeduplication: true });
    const c2 = await client.publish({ url: destUrl + cpath, body: "same", contentBasedDeduplication: true });
    const c3 = await client.publish({ url: destUrl + cpath, body: "different", contentBasedDeduplication: true });
    expect(c2.messageId).toBe(c1.messageId);
    expect(c3.messageId).not.toBe(c1.messageId);

    await waitFor("deliveries", () => (deliveredTo(path).length >= 1 && deliveredTo(cpath).length >= 2) || undefined);
    await Bun.sleep(200);
    expect(deliveredTo(path).map((d) => d.body)).toEqual(["one"]);
    expect(
      deliveredTo(cpath)
        .map((d) => d.body)
        .sort(),
    ).toEqual(["different", "same"]);
  });

  test("retries exhausted → DLQ; re-drive delivers again; dlq.delete removes", async () => {
    const redrivePath = uniquePath("toggle");
    const deletePath = uniquePath("fail");
    const a = await client.publish({ url: destUrl + redrivePath, body: "to redrive", retries: 2, retryDelay: "1000" });
    const b = await client.publish({ url: destUrl + deletePath, body: "to delete", retries: 2, retryDelay: "1000" });

    const inDlq = async (messageId: string) => {
      const { messages } = await client.dlq.listMessages();
      return messages.find((m) => m.messageId === messageId);
    };
    const ea = await waitFor("message a in DLQ", () => inDlq(a.messageId));
    const eb = await waitFor("message b in DLQ", () => inDlq(b.messageId));
    expect(deliveredTo(redrivePath)).toHaveLength(3); // first attempt + 2 retries
    expect(ea.url).toBe(destUrl + redrivePath);
    expect(ea.body).toBe("to redrive");
    expect(ea.responseStatus).toBe(503);
    expect(ea.responseBody).toBe("toggle");
    expect(ea.maxRetries).toBe(2);
    expect(eb.responseStatus).toBe(500);

    const filtered = await client.dlq.listMessages({ filter: { url: destUrl + deletePath } });
    expect(filtered.messages.map((m) => m.dlqId)).toEqual([eb.dlqId]);

    healed.add(redrivePath);
    const { responses } = await client.dlq.retry(ea.dlqId);
    expect(responses).toHaveLength(1);
    const again = await waitFor("re-driven delivery", () => deliveredTo(redrivePath)[3]);
    expect(again.body).toBe("to redrive");
    expect(again.headers.get("upstash-message-id")).toBe(responses[0]!.messageId);
    expect(again.headers.get("upstash-retried")).toBe("0");
    expect(await inDlq(a.messageId)).toBeUndefined();

    expect(await client.dlq.delete(eb.dlqId)).toEqual({ deleted: 1 });
    expect(await inDlq(b.messageId)).toBeUndefined();
    await expect(client.dlq.delete(eb.dlqId)).rejects.toMatchObject({ status: 404 });
    expect(qstash.stats().dlq).toBeGreaterThanOrEqual(2);
  });

  test("batch and batchJSON deliver every message", async () => {
    const p1 = uniquePath("ok");
    const p2 = uniquePath("ok");
    const p3 = uniquePath("ok");
    const res = await client.batch([
      { url: destUrl + p1, body: "b1", headers: { "X-One": "1" } },
      { url: destUrl + p2, body: "b2", method: "PATCH", delay: 10 },
    ]);
    expect(res).toHaveLength(2);
    const resJson = await client.batchJSON([
      { url: destUrl + p3, body: "a string" },
      { url: destUrl + p3, body: { k: [1, 2] } },
    ]);
    expect(resJson).toHaveLength(2);
    const d1 = await waitFor("b1", () => deliveredTo(p1)[0]);
    const d2 = await waitFor("b2", () => deliveredTo(p2)[0]);
    await waitFor("batchJSON", () => deliveredTo(p3).length >= 2 || undefined);
    expect(d1.body).toBe("b1");
    expect(d1.headers.get("x-one")).toBe("1");
    expect(d2.method).toBe("PATCH");
    expect(
      deliveredTo(p3)
        .map((d) => d.body)
        .sort(),
    ).toEqual(['"a string"', '{"k":[1,2]}']);
    expect(deliveredTo(p3).every((d) => d.headers.get("content-type") === "application/json")).toBe(true);
  });

  test("messages.get and messages.cancel on a pending message", async () => {
    const path = uniquePath("ok");
    const { messageId } = await client.publish({ url: destUrl + path, body: "cancel me", delay: 1000 });
    const m = await client.messages.get(messageId);
    expect(m.messageId).toBe(messageId);
    expect(m.url).toBe(destUrl + path);
    expect(m.body).toBe("cancel me");
    expect(m.method).toBe("POST");
    expect(m.notBefore).toBeGreaterThan(Date.now());
    expect(await client.messages.cancel(messageId)).toEqual({ cancelled: 1 });
    await expect(client.messages.get(messageId)).rejects.toMatchObject({ status: 404 });
  });

  test("auth, bad input and unknown routes", async () => {
    const bad = new Client({ baseUrl: qstash.url, token: "wrong-token", devMode: false, retry: false });
    const err = await bad.publish({ url: `${destUrl}/ok/x`, body: "x" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(QstashError);
    expect((err as QstashError).status).toBe(401);

    const auth = { Authorization: `Bearer ${TOKEN}` };
    const post = (path: string, init: RequestInit = {}) =>
      fetch(qstash.url + path, {
        method: "POST",
        ...init,
        headers: { ...auth, ...(init.headers as Record<string, string>) },
      });
    expect((await post("/v2/batch", { body: "[{not json" })).status).toBe(400);
    expect((await post("/v2/batch", { body: '{"destination":"x"}' })).status).toBe(400);
    expect((await post("/v2/batch", { body: "[42]" })).status).toBe(400);
    expect((await post(`/v2/publish/${destUrl}/ok/x`, { headers: { "Upstash-Delay": "soon" } })).status).toBe(400);
    expect(
      (await post(`/v2/publish/${destUrl}/ok/x`, { headers: { "Upstash-Retry-Delay": "eval('1')" } })).status,
    ).toBe(400);
    expect((await post(`/v2/publish/${destUrl}/ok/x`, { headers: { "Upstash-Retries": "-1" } })).status).toBe(400);
    expect((await post(`/v2/publish/ftp://example.com/x`)).status).toBe(400);
    const unknown = await fetch(`${qstash.url}/v2/nothing-here`, { headers: auth });
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toHaveProperty("error");
    expect((await fetch(`${qstash.url}/`, { headers: auth })).status).toBe(404);
    const keys = await fetch(`${qstash.url}/v2/keys`, { headers: auth });
    expect(await keys.json()).toEqual({ current: CURRENT, next: NEXT });
  });

  test("two instances on one Redis deliver each message exactly once", async () => {
    const second = await startQstash();
    try {
      const paths = Array.from({ length: 20 }, () => uniquePath("ok"));
      await client.batch(paths.map((p) => ({ url: destUrl + p, body: p })));
      await waitFor("all 20", () => paths.every((p) => deliveredTo(p).length >= 1) || undefined);
      await Bun.sleep(200);
      expect(paths.map((p) => deliveredTo(p).length)).toEqual(paths.map(() => 1));
    } finally {
      await second.stop();
    }
  });

  test("a lease left behind by a crashed instance expires and the message is re-delivered", async () => {
    const prefix = "crash:";
    const inst = await startQstash({ keyPrefix: prefix });
    const raw = new RedisClient(`redis://${redis.host}:${redis.port}`);
    try {
      const c = new Client({ baseUrl: inst.url, token: TOKEN, devMode: false, retry: false });
      const path = uniquePath("ok");
      const { messageId } = await c.publish({ url: destUrl + path, body: "orphan", delay: 100_000 });
      // Make it look claimed by a dead instance whose lease ran out a moment ago.
      await raw.send("ZREM", [`${prefix}due`, messageId]);
      await raw.send("ZADD", [`${prefix}inflight`, String(Date.now() - 1), messageId]);
      await raw.send("HSET", [`${prefix}leases`, messageId, "dead-instance:1"]);
      const d = await waitFor("re-delivery", () => deliveredTo(path)[0], 3000);
      expect(d.headers.get("upstash-message-id")).toBe(messageId);
      await Bun.sleep(100);
      expect(deliveredTo(path)).toHaveLength(1);
      expect(Number(await raw.send("ZCARD", [`${prefix}inflight`]))).toBe(0);
      expect(await raw.send("EXISTS", [`${prefix}msg:${messageId}`])).toBeFalsy();
    } finally {
      raw.close();
      await inst.stop();
    }
  });

  test("restart: a delayed message survives a stop and is delivered exactly once by the next instance", async () => {
    const first = await startQstash({ keyPrefix: "restart:" });
    const c1 = new Client({ baseUrl: first.url, token: TOKEN, devMode: false, retry: false });
    const path = uniquePath("ok");
    const t0 = Date.now();
    const { messageId } = await c1.publish({ url: destUrl + path, body: "survivor", delay: 120 }); // 1.2 s
    await first.stop();
    expect(deliveredTo(path)).toHaveLength(0);
    const second = await startQstash({ keyPrefix: "restart:" });
    try {
      const d = await waitFor("delivery after restart", () => deliveredTo(path)[0], 5000);
      expect(d.at - t0).toBeGreaterThanOrEqual(1200);
      expect(d.headers.get("upstash-message-id")).toBe(messageId);
      await Bun.sleep(300);
      expect(deliveredTo(path)).toHaveLength(1);
      expect(second.stats().delivered).toBe(1);
      expect(first.stats().delivered).toBe(0);
    } finally {
      await second.stop();
    }
  });
});

/**
 * Every route with a body method takes only the content types it declares, each bounded while it
 * streams and before anything parses it (issue 16 item 1; src/http/body.ts). The routes come from
 * /openapi.json, where each one's body middleware documents what it takes (`x-body-limits`): a
 * new body route without a limit fails the first test, and every route found gets the probes.
 *
 * - a non-empty body of a type the route does not take → 415 UNSUPPORTED_MEDIA_TYPE, whether its
 *   length is declared (nothing read) or it is chunked (at most the first chunk read);
 * - an oversized body of each type it takes → 413 PAYLOAD_TOO_LARGE, by Content-Length before
 *   reading or while streaming (read no further than the limit plus a chunk or two), and past the
 *   piece limit (multipart parts) likewise;
 * - an empty body of any type, or none, is never refused for its type or size (classic clients
 *   send bodiless POST/PUT with or without a content type).
 * A 413/415 envelope means no handler ran: these handlers never answer either (the upload's own
 * "file too large" needs the whole body, which the read bound excludes), and a middleware that
 * throws ends the chain before the handler.
 */
import { describe, expect, test } from "bun:test";
import { SESSION_COOKIE } from "../../src/console/session.ts";
import { newUser } from "../support/social.ts";
import { createTestApp, getStack } from "../support/stack.ts";
import { ORDER_CLOSE_PATH, ORDER_DRAIN_PATH, PAYMENT_WEBHOOK_PATH } from "../../src/queue/messages.ts";

type BodyLimit = { maxBytes: number | { config: string; plus: number }; maxPairs?: number; maxParts?: number };
type Operation = {
  security?: Record<string, string[]>[];
  requestBody?: { content: Record<string, unknown> };
  "x-body-limits"?: Record<string, BodyLimit>;
};
type Route = { method: string; path: string; op: Operation };

const BODY_METHODS = new Set(["post", "put", "patch", "delete"]);
/** The console accepts forms from the configured PUBLIC_URL's origin only. */
const ORIGIN = new URL(String((await getStack()).env.PUBLIC_URL)).origin;
const CHUNK = 1024;
const BOUNDARY = "----content-types";
/** Types probed against every route: each one a route does not take must be a 415. */
const CANDIDATE_TYPES: (string | null)[] = [
  "application/json",
  "application/json; charset=utf-8",
  "application/x-www-form-urlencoded",
  `multipart/form-data; boundary=${BOUNDARY}`,
  "text/plain",
  "text/plain;charset=UTF-8",
  "application/octet-stream",
  "application/xml",
  null,
];
const essence = (type: string | null) => (type ?? "").split(";")[0]?.trim().toLowerCase() ?? "";
const isJson = (type: string) => /^application\/([\w.-]+\+)?json$/.test(type);

const t = await createTestApp({ UPLOAD_MAX_BYTES: "8192", OPERATOR_AUTH_FAILURES: "0" });
const document = (await (await t.app.request("/openapi.json")).json()) as {
  paths: Record<string, Record<string, Operation>>;
};
const ROUTES: Route[] = Object.entries(document.paths).flatMap(([path, item]) =>
  Object.entries(item)
    .filter(([method]) => BODY_METHODS.has(method))
    .map(([method, op]) => ({ method, path, op })),
);
/** A client address of its own, so console sign-in probes share no per-address state with other files. */
const IP = `10.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}.7`;

/** The media types a route takes: its documented limits (or, for a route that has none, its documented request body). */
function takes(route: Route): string[] {
  return Object.keys(route.op["x-body-limits"] ?? route.op.requestBody?.content ?? {});
}

function accepted(route: Route, type: string | null): boolean {
  const e = essence(type);
  return takes(route).some((m) => m === e || (m === "application/json" && isJson(e)));
}

function bytesOf(limit: BodyLimit): number {
  const { maxBytes } = limit;
  if (typeof maxBytes === "number") return maxBytes;
  return (t.deps.config as unknown as Record<string, number>)[maxBytes.config]! + maxBytes.plus;
}

/** Path parameters filled with ids nothing has (an empty-body probe that runs the route finds nothing). */
function urlOf(route: Route): string {
  return route.path
    .replace("{isFollow}", "true")
    .replace("{voucherId}", "9007199254740991")
    .replace(/\{id\}/, route.path.includes("voucher-order") ? "9223372036854775807" : "9007199254740991");
}

/** Headers that get a request past the route's guard to its body checks (a fresh user or console session each time). */
async function credentials(route: Route): Promise<Record<string, string>> {
  const scheme = Object.keys(route.op.security?.[0] ?? {})[0];
  if (scheme === "userToken") return { authorization: (await newUser(t)).token };
  if (scheme === "operatorBearer") return { authorization: `Bearer ${t.deps.config.ADMIN_TOKEN}` };
  if (scheme === "qstashSignature") return { "upstash-signature": "not-verified-before-the-body-checks" };
  if (scheme === "paymentSignature") return { "x-payment-signature": "t=0,v1=0" };
  if (route.path.startsWith("/console/")) {
    const login = await t.app.request(
      "/console/login",
      {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded", origin: ORIGIN },
        body: `token=${encodeURIComponent(t.deps.config.ADMIN_TOKEN)}`,
      },
      { clientIp: IP },
    );
    const value = new RegExp(`${SESSION_COOKIE}=([^;]+)`).exec(login.headers.get("set-cookie") ?? "")?.[1];
    if (!value) throw new Error(`no console session (${login.status})`);
    return { origin: ORIGIN, cookie: `${SESSION_COOKIE}=${value}` };
  }
  return {};
}

/** A body that counts what the app pulls from it. */
function counted(bytes: Uint8Array) {
  const state = { pulled: 0 };
  let at = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(ctl) {
      if (at >= bytes.byteLength) return ctl.close();
      const next = bytes.slice(at, at + CHUNK);
      at += next.byteLength;
      state.pulled += next.byteLength;
      ctl.enqueue(next);
    },
  });
  return { stream, state };
}

async function send(
  route: Route,
  auth: Record<string, string>,
  type: string | null,
  body: Uint8Array,
  declared: boolean,
) {
  const headers: Record<string, string> = { ...auth };
  if (type !== null) headers["content-type"] = type;
  if (declared) headers["content-length"] = String(body.byteLength);
  const { stream, state } = counted(body);
  const res = await t.app.request(
    urlOf(route),
    { method: route.method.toUpperCase(), headers, body: stream, duplex: "half" } as RequestInit,
    { clientIp: IP },
  );
  const text = await res.text();
  let code: string | undefined;
  try {
    code = (JSON.parse(text) as { code?: string }).code;
  } catch {
    code = undefined;
  }
  return { status: res.status, code, pulled: state.pulled };
}

const encode = (s: string) => new TextEncoder().encode(s);

/** A body of `type` of at least `size` bytes, shaped like one (never valid past its limit anyway). */
function bodyOf(type: string, size: number): Uint8Array {
  const e = essence(type);
  if (e === "multipart/form-data") {
    const head = `--${BOUNDARY}\r\ncontent-disposition: form-data; name="file"; filename="a.png"\r\ncontent-type: image/png\r\n\r\n`;
    return encode(`${head}${"a".repeat(Math.max(0, size - head.length))}\r\n--${BOUNDARY}--\r\n`);
  }
  if (e === "application/x-www-form-urlencoded") return encode(`a=${"a".repeat(Math.max(0, size - 2))}`);
  return encode(`{"a":"${"a".repeat(Math.max(0, size - 8))}"}`);
}

const headerFor = (mediaType: string) =>
  mediaType === "multipart/form-data" ? `multipart/form-data; boundary=${BOUNDARY}` : mediaType;

describe("content types and limits of every body route (from /openapi.json)", () => {
  test("every route with a body method declares what it takes and its limits, each within MAX_BODY_BYTES (uploads excepted)", () => {
    expect(ROUTES.length).toBeGreaterThan(20);
    const undeclared = ROUTES.filter((r) => Object.keys(r.op["x-body-limits"] ?? {}).length === 0).map(
      (r) => `${r.method} ${r.path}`,
    );
    expect(undeclared).toEqual([]);
    for (const r of ROUTES) {
      for (const [type, limit] of Object.entries(r.op["x-body-limits"] ?? {})) {
        const where = `${r.method} ${r.path} ${type}`;
        expect([where, bytesOf(limit) > 0]).toEqual([where, true]);
        if (r.path !== "/api/upload/blog")
          expect([where, bytesOf(limit) <= t.deps.config.MAX_BODY_BYTES]).toEqual([where, true]);
      }
    }
  });

  for (const route of ROUTES) {
    const name = `${route.method.toUpperCase()} ${route.path}`;
    describe(name, () => {
      test("a non-empty body of each type it does not take is a 415 (declared: nothing read; chunked: one chunk at most); an empty body of any type, or none, passes", async () => {
        const auth = await credentials(route);
        const refused = CANDIDATE_TYPES.filter((type) => !accepted(route, type));
        expect(refused.length).toBeGreaterThan(0);
        for (const type of refused) {
          for (const declared of [true, false]) {
            const res = await send(route, auth, type, encode("x".repeat(64 * CHUNK)), declared);
            expect([type, declared, res.status, res.code]).toEqual([type, declared, 415, "UNSUPPORTED_MEDIA_TYPE"]);
            expect([type, declared, res.pulled <= 4 * CHUNK]).toEqual([type, declared, true]);
          }
        }
        // Empty: never refused for its type or size (classic clients send bodiless POST/PUT with or without a type).
        const empty: [string | null, string, number][] = [];
        for (const type of CANDIDATE_TYPES) {
          for (const declared of [true, false])
            empty.push([
              type,
              declared ? "declared" : "chunked",
              (await send(route, auth, type, new Uint8Array(0), declared)).status,
            ]);
        }
        const none = await t.app.request(
          urlOf(route),
          { method: route.method.toUpperCase(), headers: auth },
          { clientIp: IP },
        );
        await none.arrayBuffer();
        empty.push([null, "no body", none.status]);
        expect(empty.filter(([, , status]) => status === 413 || status === 415)).toEqual([]);
        // Bodiless posts run their handlers: POST /admin/reconcile runs a whole reconcile each time,
        // over every voucher the suite created so far.
      }, 60_000);

      test("an oversized body of each type it takes is a 413, by Content-Length before reading or while it streams", async () => {
        const limits = Object.entries(route.op["x-body-limits"] ?? {});
        expect(limits.length).toBeGreaterThan(0);
        const auth = await credentials(route);
        for (const [mediaType, limit] of limits) {
          const max = bytesOf(limit);
          const body = bodyOf(mediaType, max + 32 * CHUNK);
          const declared = await send(route, auth, headerFor(mediaType), body, true);
          expect([mediaType, "declared", declared.status, declared.code]).toEqual([
            mediaType,
            "declared",
            413,
            "PAYLOAD_TOO_LARGE",
          ]);
          expect([mediaType, "declared", declared.pulled <= 2 * CHUNK]).toEqual([mediaType, "declared", true]);
          const chunked = await send(route, auth, headerFor(mediaType), body, false);
          expect([mediaType, "chunked", chunked.status, chunked.code]).toEqual([
            mediaType,
            "chunked",
            413,
            "PAYLOAD_TOO_LARGE",
          ]);
          expect([mediaType, "chunked", chunked.pulled <= max + 4 * CHUNK]).toEqual([mediaType, "chunked", true]);
          if (limit.maxParts !== undefined) {
            const part = (i: number) => `--${BOUNDARY}\r\ncontent-disposition: form-data; name="f${i}"\r\n\r\nx\r\n`;
            const parts = encode(
              `${Array.from({ length: limit.maxParts + 1 }, (_, i) => part(i)).join("")}--${BOUNDARY}--\r\n`,
            );
            const res = await send(route, auth, headerFor(mediaType), parts, false);
            expect([mediaType, "parts", res.status, res.code]).toEqual([mediaType, "parts", 413, "PAYLOAD_TOO_LARGE"]);
          }
        }
      });
    });
  }
});

describe("what clients send", () => {
  test("the classic client's requests pass (axios JSON with its charset, bodiless posts with or without a type, `{}`), what it never sends is a 415", async () => {
    const login = (type: string, body: string) =>
      t.app.request("/api/user/login", { method: "POST", headers: { "content-type": type }, body });
    const axios = await login(
      "application/json;charset=utf-8",
      JSON.stringify({ phone: "13900000000", code: "000000" }),
    );
    expect([axios.status, ((await axios.json()) as { code?: string }).code]).toEqual([200, "BAD_CODE"]);
    // `curl -d '{…}'` sends a form: it used to reach the validator as `{}` (a 400 naming every field).
    const curl = await login(
      "application/x-www-form-urlencoded",
      JSON.stringify({ phone: "13900000000", code: "000000" }),
    );
    expect([curl.status, ((await curl.json()) as { code?: string }).code]).toEqual([415, "UNSUPPORTED_MEDIA_TYPE"]);
    const user = await newUser(t);
    const sign = (headers: Record<string, string>, body?: string) =>
      t.app.request("/api/user/sign", { method: "POST", headers: { authorization: user.token, ...headers }, body });
    const bodiless: Record<string, string>[] = [
      {},
      { "content-type": "application/x-www-form-urlencoded" },
      { "content-type": "application/json" },
    ];
    for (const headers of bodiless) {
      const res = await sign(headers);
      expect([headers, res.status, ((await res.json()) as { success: boolean }).success]).toEqual([headers, 200, true]);
    }
    expect((await sign({ "content-type": "application/json" }, "{}")).status).toBe(200);
    expect((await sign({ "content-type": "text/plain" }, "hello")).status).toBe(415);
  });

  test("the close limit fits the largest legitimate message (5,000 ids of 19 digits) and nothing past it", async () => {
    const close = (body: string) =>
      t.app.request(ORDER_CLOSE_PATH, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "content-length": String(body.length),
          "upstash-signature": "forged",
        },
        body,
      });
    const orderIds = Array.from({ length: 5000 }, (_, i) => String(9_000_000_000_000_000_000n + BigInt(i)));
    const largest = JSON.stringify({ shopId: Number.MAX_SAFE_INTEGER, orderIds });
    // Reaches the signature check (401), which runs after the bounded read.
    expect((await close(largest)).status).toBe(401);
    const limit = document.paths[ORDER_CLOSE_PATH]?.post?.["x-body-limits"]?.["application/json"];
    expect(limit).toBeDefined();
    const over = `${largest.slice(0, -1)},"pad":"${"x".repeat(bytesOf(limit as BodyLimit) - largest.length)}"}`;
    expect((await close(over)).status).toBe(413);
  });

  test("an unsigned callback is refused before its body is read", async () => {
    for (const path of [ORDER_DRAIN_PATH, ORDER_CLOSE_PATH, PAYMENT_WEBHOOK_PATH]) {
      const { stream, state } = counted(encode(`{"a":"${"a".repeat(200 * CHUNK)}"}`));
      const res = await t.app.request(path, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: stream,
        duplex: "half",
      } as RequestInit);
      expect([path, res.status, state.pulled <= 2 * CHUNK]).toEqual([path, 401, true]);
    }
  });
});

describe("public routes with a body are limited per address before any parsing", () => {
  test("past PUBLIC_BODIES_PER_ADDRESS, sign-in and send-code are a 429 with Retry-After and not a byte of the body is read; another address is not affected", async () => {
    const gated = await createTestApp({ PUBLIC_BODIES_PER_ADDRESS: "5", PUBLIC_BODIES_WINDOW_MS: "60000" });
    const ip = `10.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}.9`;
    const post = async (
      path: string,
      from: string,
      body = encode(JSON.stringify({ phone: "13800000000", code: "000000" })),
    ) => {
      const { stream, state } = counted(body);
      const res = await gated.app.request(
        path,
        {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: stream,
          duplex: "half",
        } as RequestInit,
        { clientIp: from },
      );
      await res.arrayBuffer();
      return { status: res.status, retryAfter: res.headers.get("retry-after"), pulled: state.pulled };
    };
    // Five sign-ins with a wrong code spend the address's budget (answered by the route: not a 429).
    for (let i = 0; i < 5; i++) expect((await post("/api/user/login", ip)).status).not.toBe(429);
    for (const path of ["/api/user/login", "/api/user/code?phone=13800000000"]) {
      const refused = await post(path, ip, encode("x".repeat(64 * CHUNK)));
      expect(refused.status).toBe(429);
      expect(Number(refused.retryAfter)).toBeGreaterThanOrEqual(1);
      // At most the request plumbing's read-ahead (two chunks, as for the 415s above) of 64: the app read nothing.
      expect(refused.pulled).toBeLessThanOrEqual(2 * CHUNK);
    }
    expect((await post("/api/user/login", "10.250.250.250")).status).not.toBe(429);
    await gated.settle();
  });
});

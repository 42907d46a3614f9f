/**
 * Route contract, generated from `/openapi.json`: every operation the document declares secured is
 * called without credentials (and with forged ones) and must refuse — so a route added with a
 * security requirement is covered here without touching this file, and a route whose guard was
 * forgotten fails here.
 *
 * How access is declared (src/openapi/describe.ts `SECURITY`, console.tsx `page`/`post`):
 * - `security: [{ userToken: [] }]` — a user session (api.md "Auth"): 401 envelope `UNAUTHORIZED`.
 *   `[{}, { userToken: [] }]` is optional-user: anonymous is valid, so it must *not* be a 401.
 * - `security: [{ operatorBearer: [] }]` — the operator secret; user tokens never pass (api.md
 *   "Operator routes"): 401 envelope.
 * - `x-signed-callback: qstash | webhook` — QStash's `Upstash-Signature` / the provider's
 *   `x-payment-signature` over the raw body: unsigned or wrongly signed, a 401 envelope.
 * - `/console/*` is documented with no scheme (a browser cookie, not a header the reference can
 *   send): each operation's description says it "needs the (console) session cookie". api.md is
 *   silent on the console; the document says pages redirect to POST /console/login's form, and the
 *   guard (requireConsole) answers event streams and form posts 401 — HTML, not the envelope.
 */
import { describe, expect, test } from "bun:test";
import type { Hono } from "hono";
import type { AppEnv } from "../../src/types.ts";
import { loginAs } from "../support/http.ts";
import { createTestApp } from "../support/stack.ts";
import { ORDER_CLOSE_PATH, ORDER_DRAIN_PATH } from "../../src/queue/messages.ts";

type Schema = { type?: string; enum?: unknown[]; const?: unknown; pattern?: string; minimum?: number };
type Parameter = { name: string; in: string; required?: boolean; schema?: Schema };
type Operation = {
  description?: string;
  security?: Record<string, string[]>[];
  parameters?: Parameter[];
  requestBody?: { content: Record<string, unknown> };
  responses?: Record<string, { content?: Record<string, unknown> }>;
  "x-signed-callback"?: "qstash" | "webhook";
};
type Doc = { paths: Record<string, Record<string, Operation>> };

type Kind = "user" | "operator" | "qstash" | "webhook" | "console";
interface Checked {
  id: string;
  method: string;
  path: string;
  op: Operation;
  guarded: boolean;
}

/** /console operations that are public although their description is the console default: the way in, and its files. */
const PUBLIC_CONSOLE = ["get /console/login", "post /console/login", "get /console/assets/{file}"];
const CONSOLE_COOKIE = /needs the (console )?session cookie/;
const LOGIN = "/console/login";

function kindOf(method: string, path: string, op: Operation): Kind | "optional" | "public" {
  const schemes = (op.security ?? []).map((s) => Object.keys(s));
  const signed = op["x-signed-callback"];
  if (signed) return signed;
  if (schemes.some((s) => s.length === 0)) return "optional";
  if (schemes.some((s) => s.includes("operatorBearer"))) return "operator";
  if (schemes.some((s) => s.includes("userToken"))) return "user";
  if (
    path.startsWith("/console") &&
    !PUBLIC_CONSOLE.includes(`${method} ${path}`) &&
    CONSOLE_COOKIE.test(op.description ?? "")
  )
    return "console";
  return "public";
}

/** Values tried, in order, for a string parameter with a pattern; the first the pattern accepts is used. */
const CANDIDATES = ["1", "123", "x", "blogs/1/x.png", "a"];

/** A valid value for a parameter, from its schema (throws when none of the candidates fits: add one). */
function sampleOf(where: string, p: Parameter): string {
  const s = p.schema ?? {};
  if (s.enum?.length) return String(s.enum[0]);
  if (s.const !== undefined) return String(s.const);
  if (s.type === "integer" || s.type === "number") return String(Math.max(1, s.minimum ?? 1));
  if (s.type === "boolean") return "true";
  if (!s.pattern) return p.in === "path" ? "x" : "1";
  const re = new RegExp(s.pattern, "u");
  const value = CANDIDATES.find((c) => re.test(c));
  if (value === undefined)
    throw new Error(`${where}: no sample value for parameter ${p.name} (pattern ${s.pattern}); add one to CANDIDATES`);
  return value;
}

/**
 * The operation's URL with every path parameter filled with a valid value, and for a guarded one its
 * required query parameters too (so only the guard can refuse it). Public operations go without
 * them: a 400 is as good as any answer that is not a 401, and a valid `phone` would send a code.
 */
function urlOf(c: Checked, query = new URLSearchParams()): string {
  let url = c.path;
  for (const p of c.op.parameters ?? []) {
    if (p.in === "path") url = url.replace(`{${p.name}}`, encodeURIComponent(sampleOf(c.id, p)).replace(/%2F/g, "/"));
    else if (p.in === "query" && p.required && c.guarded) query.set(p.name, sampleOf(c.id, p));
  }
  expect([c.id, /\{[^}]+\}/.test(url)]).toEqual([c.id, false]);
  const qs = query.toString();
  return qs ? `${url}?${qs}` : url;
}

/** A body of the operation's declared media type (its content is irrelevant: the guard answers first). */
function bodyOf(c: Checked): { headers: Record<string, string>; body?: BodyInit } {
  const types = Object.keys(c.op.requestBody?.content ?? {});
  if (types.includes("application/json")) return { headers: { "content-type": "application/json" }, body: "{}" };
  if (types.includes("multipart/form-data")) {
    const form = new FormData();
    form.set("file", new File([new Uint8Array([0x89, 0x50, 0x4e, 0x47])], "x.png", { type: "image/png" }));
    return { headers: {}, body: form };
  }
  // Console form posts (documented as HTML pages, no requestBody) take a url-encoded form.
  if (c.method === "post" || c.method === "put")
    return { headers: { "content-type": "application/x-www-form-urlencoded" }, body: "_csrf=x" };
  return { headers: {} };
}

let addresses = 0;
/**
 * A fresh client address per call: failed operator credentials count per address
 * (http/operator-attempts.ts), and this suite sends dozens — each must be judged on its own (401),
 * never as part of a burst (429).
 */
const nextAddress = () => {
  addresses++;
  return `198.18.${Math.floor(addresses / 250) % 250}.${(addresses % 250) + 1}`;
};

async function send(app: Hono<AppEnv>, c: Checked, headers: Record<string, string> = {}): Promise<Response> {
  const { headers: bodyHeaders, body } = bodyOf(c);
  return await app.request(
    urlOf(c),
    { method: c.method.toUpperCase(), headers: { ...bodyHeaders, ...headers }, body, redirect: "manual" },
    { clientIp: nextAddress() },
  );
}

/** `null` when `res` is the 401 error envelope with a request id matching its header, else what it was instead. */
async function notEnvelope401(res: Response): Promise<string | null> {
  const text = await res.text();
  let body: Record<string, unknown> = {};
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {}
  const rid = res.headers.get("x-request-id");
  const ok =
    res.status === 401 &&
    body.success === false &&
    body.code === "UNAUTHORIZED" &&
    typeof body.errorMsg === "string" &&
    typeof rid === "string" &&
    rid.length > 0 &&
    body.requestId === rid;
  return ok ? null : `${res.status} ${text.slice(0, 160)}`;
}

async function contract() {
  const t = await createTestApp();
  const res = await t.app.request("/openapi.json");
  expect(res.status).toBe(200);
  const doc = (await res.json()) as Doc;
  const byKind: Record<Kind | "optional" | "public", Checked[]> = {
    user: [],
    operator: [],
    qstash: [],
    webhook: [],
    console: [],
    optional: [],
    public: [],
  };
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      const kind = kindOf(method, path, op);
      byKind[kind].push({
        id: `${method} ${path}`,
        method,
        path,
        op,
        guarded: kind !== "optional" && kind !== "public",
      });
    }
  }
  return { ...t, doc, byKind };
}

const ids = (list: Checked[]) => list.map((c) => c.id);

describe("route contract (generated from /openapi.json)", () => {
  test("the generated lists are not empty and hold a known operation of each kind; every /admin and /internal operation is guarded", async () => {
    const { byKind, doc } = await contract();
    expect(ids(byKind.user)).toEqual(
      expect.arrayContaining([
        "post /api/voucher-order/seckill/{voucherId}",
        "get /api/user/me",
        "post /api/upload/blog",
      ]),
    );
    expect(ids(byKind.operator)).toEqual(
      expect.arrayContaining(["get /admin/cache", "post /api/voucher/seckill", "post /admin/reconcile"]),
    );
    expect(ids(byKind.qstash)).toEqual(
      expect.arrayContaining([`post ${ORDER_DRAIN_PATH}`, `post ${ORDER_CLOSE_PATH}`]),
    );
    expect(ids(byKind.webhook)).toEqual(["post /internal/payments/webhook"]);
    expect(ids(byKind.console)).toEqual(
      expect.arrayContaining([
        "get /console",
        "get /console/sale/{voucherId}",
        "get /console/sale/{voucherId}/events",
        "post /console/vouchers",
        "post /console/logout",
      ]),
    );
    expect(ids(byKind.optional)).toEqual(expect.arrayContaining(["get /api/blog/hot"]));
    // The public exceptions of the console still exist (a renamed login route would leave a stale one here).
    const documented = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.keys(item).map((m) => `${m} ${path}`),
    );
    expect(documented).toEqual(expect.arrayContaining(PUBLIC_CONSOLE));
    const guarded = new Set(ids([...byKind.operator, ...byKind.qstash, ...byKind.webhook]));
    expect(documented.filter((d) => / \/(admin|internal)(\/|$)/.test(d) && !guarded.has(d))).toEqual([]);
    // And every /console operation is either the console's cookie or one of the named public ones.
    const consoleIds = new Set(ids(byKind.console));
    expect(
      documented.filter((d) => / \/console(\/|$)/.test(d) && !consoleIds.has(d) && !PUBLIC_CONSOLE.includes(d)),
    ).toEqual([]);
  });

  test("every user-token operation answers the 401 envelope without a token, with a forged one and with the operator's", async () => {
    const { app, byKind, deps } = await contract();
    expect(byKind.user.length).toBeGreaterThan(20);
    const wrong: string[] = [];
    for (const c of byKind.user) {
      for (const [label, headers] of [
        ["no token", {}],
        ["forged token", { authorization: "Bearer not-a-session-token" }],
        ["operator token", { authorization: `Bearer ${deps.config.ADMIN_TOKEN}` }],
      ] as const) {
        const why = await notEnvelope401(await send(app, c, headers));
        if (why) wrong.push(`${c.id} (${label}): ${why}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  test("every operator operation answers the 401 envelope without credentials, with a wrong secret and with a user's token", async () => {
    const { app, byKind, deps } = await contract();
    expect(byKind.operator.length).toBeGreaterThan(8);
    const { token } = await loginAs(app, deps);
    const wrong: string[] = [];
    for (const c of byKind.operator) {
      for (const [label, headers] of [
        ["no credentials", {}],
        ["wrong secret", { authorization: `Bearer ${deps.config.ADMIN_TOKEN}x` }],
        ["user token", { authorization: `Bearer ${token}` }],
      ] as const) {
        const why = await notEnvelope401(await send(app, c, headers));
        if (why) wrong.push(`${c.id} (${label}): ${why}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  test("every signed callback answers the 401 envelope unsigned and with a forged signature", async () => {
    const { app, byKind, deps } = await contract();
    const forged = {
      qstash: { "upstash-signature": "eyJhbGciOiJIUzI1NiJ9.e30.forged" },
      webhook: { "x-payment-signature": `t=${Math.floor(deps.clock.now() / 1000)},v1=${"0".repeat(64)}` },
    };
    const wrong: string[] = [];
    for (const kind of ["qstash", "webhook"] as const) {
      for (const c of byKind[kind]) {
        for (const [label, headers] of [
          ["unsigned", {}],
          ["forged signature", forged[kind]],
        ] as const) {
          const why = await notEnvelope401(await send(app, c, headers));
          if (why) wrong.push(`${c.id} (${label}): ${why}`);
        }
      }
    }
    expect(wrong).toEqual([]);
  });

  test("every console operation behind the session cookie: pages redirect to the sign-in form, streams and form posts are 401, with no cookie or a forged one", async () => {
    const { app, byKind } = await contract();
    expect(byKind.console.length).toBeGreaterThan(8);
    const wrong: string[] = [];
    const seen = { redirect: 0, refused: 0 };
    for (const c of byKind.console) {
      // A page is an operation whose 200 is HTML and that is read with GET; the rest (event streams, posts) are refused.
      const page = c.method === "get" && c.op.responses?.["200"]?.content?.["text/html"] !== undefined;
      for (const [label, headers] of [
        ["no cookie", {}],
        ["forged cookie", { cookie: "cityhub_console=forged.value; __Host-cityhub_console=forged.value" }],
      ] as const) {
        const res = await send(app, c, headers);
        const got = `${res.status} ${res.headers.get("location") ?? ""}`.trim();
        if (page) {
          if (got !== `302 ${LOGIN}`) wrong.push(`${c.id} (${label}): ${got}, expected 302 ${LOGIN}`);
          else seen.redirect++;
        } else if (res.status !== 401 || res.headers.get("set-cookie") !== null)
          wrong.push(`${c.id} (${label}): ${got}, expected 401`);
        else seen.refused++;
        await res.body?.cancel();
      }
    }
    expect(wrong).toEqual([]);
    expect(seen.redirect).toBeGreaterThan(0);
    expect(seen.refused).toBeGreaterThan(0);
  });

  test("optional-user and public operations never ask for credentials (no 401 without them)", async () => {
    const { app, byKind } = await contract();
    expect(byKind.public.length).toBeGreaterThan(10);
    const wrong: string[] = [];
    for (const c of [...byKind.optional, ...byKind.public]) {
      const res = await send(app, c);
      if (res.status === 401) wrong.push(`${c.id}: 401 ${await res.text()}`);
      else await res.body?.cancel();
    }
    expect(wrong).toEqual([]);
  });
});

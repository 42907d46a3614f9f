/**
 * The contract of src/queue/messages.ts: every message the app builds (drain, drain-now, close,
 * and the local payment provider's webhook events) targets a route the app registers and parses
 * with that route's schema — checked on the schema and by delivering it, signed, to the app.
 */
import { describe, expect, test } from "bun:test";
import { createPaymentProvider } from "../../src/payments/provider.ts";
import { signWebhook } from "../../src/payments/signature.ts";
import {
  CloseBody,
  closeMessage,
  DRAIN_WINDOW_MS,
  drainMessage,
  drainNowMessage,
  INTERNAL_BASE,
  LegacyWriteBody,
  MESSAGE_ROUTES,
  ORDER_CLOSE_PATH,
  ORDER_DRAIN_PATH,
  ORDER_WRITE_PATH,
  PAYMENT_WEBHOOK_PATH,
  type QueueMessage,
} from "../../src/queue/messages.ts";
import { call } from "../support/http.ts";
import { qstashSignature } from "../support/qstash-sign.ts";
import { createTestApp, type TestApp } from "../support/stack.ts";

/** POST routes the app answers (middleware entries are `ALL`). */
function postRoutes(t: TestApp): Set<string> {
  return new Set(t.app.routes.filter((r) => r.method === "POST").map((r) => r.path));
}

/** The path of a URL built for this app (PUBLIC_URL + path). */
function pathOf(t: TestApp, url: string | undefined): string {
  const base = t.deps.config.PUBLIC_URL.replace(/\/$/, "");
  if (!url?.startsWith(`${base}/`)) throw new Error(`not a URL of this app: ${url}`);
  return url.slice(base.length);
}

function routeFor(path: string) {
  const route = MESSAGE_ROUTES.find((r) => r.path === path);
  if (!route) throw new Error(`no message route for ${path}`);
  return route;
}

/** One of each QStash message the app publishes, built by the builders the publishers use. */
function builtQueueMessages(t: TestApp, shopId: number): { name: string; message: QueueMessage }[] {
  const window = Math.floor(Date.now() / DRAIN_WINDOW_MS);
  const ids = ["1", "9223372036854775807", "48213498123904"];
  return [
    { name: "drainMessage", message: drainMessage(t.deps, shopId, window) },
    { name: "drainNowMessage", message: drainNowMessage(t.deps, shopId, `contract-${crypto.randomUUID()}`) },
    { name: "closeMessage", message: closeMessage(t.deps, shopId, ids) },
  ];
}

/** Webhook deliveries the local payment provider makes (its fetch captured, nothing sent). */
async function builtWebhooks(t: TestApp): Promise<{ url: string; body: string }[]> {
  const sent: { url: string; body: string }[] = [];
  const pending: Promise<unknown>[] = [];
  const fakeFetch = (async (input: RequestInfo | URL, init?: RequestInit) => {
    sent.push({ url: String(input), body: String(init?.body) });
    return new Response("{}", { status: 200 });
  }) as typeof fetch;
  const provider = createPaymentProvider(t.deps.config, t.deps.log, () => Date.now(), fakeFetch);
  const waitUntil = (p: Promise<unknown>) => void pending.push(p);
  await provider.charge({ paymentId: "7000000000000000001", orderId: "7000000000000000002", amount: 100 }, waitUntil);
  await provider.refund(
    { refundId: "7000000000000000003", paymentId: "7000000000000000001", orderId: "7000000000000000002", amount: 100 },
    waitUntil,
  );
  await Promise.all(pending);
  return sent;
}

describe("order messages (queue/messages.ts)", () => {
  test("every message route is a POST route the app registers, and every internal POST route is a message route", async () => {
    const t = await createTestApp();
    const posts = postRoutes(t);
    for (const r of MESSAGE_ROUTES) expect(posts.has(r.path)).toBe(true);
    const internal = [...posts].filter((p) => p.startsWith(`${INTERNAL_BASE}/`)).sort();
    expect(internal).toEqual(MESSAGE_ROUTES.map((r) => r.path).sort());
  });

  test("every built QStash message targets a registered route and parses with that route's schema", async () => {
    const t = await createTestApp();
    const posts = postRoutes(t);
    const built = builtQueueMessages(t, 4242);
    expect(built.map((b) => pathOf(t, b.message.url))).toEqual([ORDER_DRAIN_PATH, ORDER_DRAIN_PATH, ORDER_CLOSE_PATH]);
    for (const { name, message } of built) {
      const path = pathOf(t, message.url);
      expect(posts.has(path)).toBe(true);
      const route = routeFor(path);
      expect(route.signedBy).toBe("qstash");
      const parsed = route.schema.safeParse(message.body);
      if (!parsed.success) throw new Error(`${name}: ${parsed.error.message}`);
    }
  });

  test("every built QStash message is accepted by its route when delivered signed (200, not 400/404)", async () => {
    const t = await createTestApp();
    // A shop of no sale: the drain finds an empty outbox, the close finds none of the ids.
    const shopId = 900_000_000 + Math.floor(Math.random() * 100_000_000);
    for (const { name, message } of builtQueueMessages(t, shopId)) {
      const body = JSON.stringify(message.body);
      const signature = await qstashSignature({
        key: t.deps.config.QSTASH_CURRENT_SIGNING_KEY,
        url: `${t.deps.config.PUBLIC_URL.replace(/\/$/, "")}${pathOf(t, message.url)}`,
        body,
      });
      const res = await call(t.app, "POST", pathOf(t, message.url), {
        body,
        headers: { "content-type": "application/json", "upstash-signature": signature },
      });
      expect({ name, status: res.status, success: res.body.success }).toEqual({ name, status: 200, success: true });
    }
  });

  test("the payment provider's webhooks target the webhook route and parse with its schema, and the route accepts them", async () => {
    const t = await createTestApp({ LOCAL_PAYMENT_DELAY_MS: "0" });
    const posts = postRoutes(t);
    const sent = await builtWebhooks(t);
    expect(sent.length).toBe(2);
    for (const { url, body } of sent) {
      const path = pathOf(t, url);
      expect(path).toBe(PAYMENT_WEBHOOK_PATH);
      expect(posts.has(path)).toBe(true);
      const route = routeFor(path);
      expect(route.signedBy).toBe("payment-provider");
      expect(route.schema.safeParse(JSON.parse(body)).success).toBe(true);
      // Unknown payment / refund ids: parsed and answered, nothing settled.
      const signature = await signWebhook(t.deps.config.PAYMENT_WEBHOOK_SECRET, body, Date.now());
      const res = await call<{ outcome: string }>(t.app, "POST", path, {
        body,
        headers: { "content-type": "application/json", "x-payment-signature": signature },
      });
      expect({ status: res.status, outcome: res.body.data?.outcome }).toEqual({
        status: 200,
        outcome: "unknown-payment",
      });
    }
  });

  test("legacy shapes (nothing builds them; removed after LEGACY_ORDER_MESSAGES_UNTIL) still parse at their routes", () => {
    expect(routeFor(ORDER_WRITE_PATH).legacy).toBe(true);
    expect(LegacyWriteBody.safeParse({ shopId: 7, orderId: "123456789" }).success).toBe(true);
    expect(CloseBody.parse({ orderId: "123456789", shopId: 7 })).toEqual({ shopId: 7, orderIds: ["123456789"] });
    expect(CloseBody.parse({ orderId: "123456789" })).toEqual({ shopId: undefined, orderIds: ["123456789"] });
  });

  test("message schemas refuse ids outside the one OrderId rule", () => {
    for (const bad of ["0", "01", "-1", "9223372036854775808", "99999999999999999999", "12a", ""]) {
      expect(CloseBody.safeParse({ shopId: 7, orderIds: [bad] }).success).toBe(false);
      expect(LegacyWriteBody.safeParse({ shopId: 7, orderId: bad }).success).toBe(false);
    }
    expect(CloseBody.safeParse({ shopId: 7, orderIds: [] }).success).toBe(false);
  });
});

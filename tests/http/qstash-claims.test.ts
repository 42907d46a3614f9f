/**
 * What a QStash delivery must carry to reach /internal/*: every claim QStash signs (iss, sub, iat,
 * nbf, exp, jti, body; docs/protocols.md §3.5), an expiry no further off than a
 * delivery's, and a token id not seen before — a captured delivery sent again is refused before
 * its handler runs (no MySQL query), while QStash's own retry (signed anew: a new jti, the same
 * message id) is processed.
 */
import { expect, test } from "bun:test";
import { ORDER_CLOSE_PATH } from "../../src/queue/messages.ts";
import { call } from "../support/http.ts";
import { type QstashClaim, qstashSignature } from "../support/qstash-sign.ts";
import { createTestApp, getStack, type TestApp } from "../support/stack.ts";

/** A close of an order nobody holds: the handler reads MySQL for it and closes nothing. */
function closeBody(): string {
  const orderId = String(8_000_000_000_000 + Math.floor(Math.random() * 1e12));
  return JSON.stringify({ shopId: 900_000_000 + Math.floor(Math.random() * 1e8), orderIds: [orderId] });
}

async function deliver(
  t: TestApp,
  body: string,
  sign: { omit?: QstashClaim[]; jti?: string; expSec?: number; signature?: string } = {},
  messageId = `msg_${crypto.randomUUID()}`,
) {
  const signature =
    sign.signature ??
    (await qstashSignature({
      key: t.deps.config.QSTASH_CURRENT_SIGNING_KEY,
      url: `${t.deps.config.PUBLIC_URL.replace(/\/$/, "")}${ORDER_CLOSE_PATH}`,
      body,
      ...sign,
    }));
  return await call(t.app, "POST", ORDER_CLOSE_PATH, {
    body,
    headers: { "content-type": "application/json", "upstash-signature": signature, "upstash-message-id": messageId },
  });
}

test("a signature missing any claim QStash signs is refused with 401, before the handler", async () => {
  const t = await createTestApp();
  expect((await deliver(t, closeBody())).status).toBe(200);
  for (const claim of ["exp", "nbf", "iat", "jti", "iss", "sub", "body"] as const) {
    const res = await deliver(t, closeBody(), { omit: [claim] });
    expect({ claim, status: res.status, code: res.body.code }).toEqual({ claim, status: 401, code: "UNAUTHORIZED" });
  }
});

test("a signature valid for longer than a delivery's (exp far off) is refused", async () => {
  const t = await createTestApp();
  const now = Math.floor(Date.now() / 1000);
  const res = await deliver(t, closeBody(), { expSec: now + 365 * 86_400 });
  expect({ status: res.status, code: res.body.code }).toEqual({ status: 401, code: "UNAUTHORIZED" });
});

test("a delivery sent again (same signature) is refused at no MySQL cost; QStash's retry, signed anew, is processed", async () => {
  const stack = await getStack();
  const t = await createTestApp();
  const other = await createTestApp();
  const body = closeBody();
  const signature = await qstashSignature({
    key: t.deps.config.QSTASH_CURRENT_SIGNING_KEY,
    url: `${t.deps.config.PUBLIC_URL.replace(/\/$/, "")}${ORDER_CLOSE_PATH}`,
    body,
  });
  const messageId = `msg_${crypto.randomUUID()}`;
  const q0 = stack.planetscale.stats().requests;
  expect((await deliver(t, body, { signature }, messageId)).status).toBe(200);
  const q1 = stack.planetscale.stats().requests;
  expect(q1).toBeGreaterThan(q0);
  // The replay, to the same isolate and to another one.
  for (const app of [t, other]) {
    const again = await deliver(app, body, { signature }, messageId);
    expect({ status: again.status, code: again.body.code }).toEqual({ status: 409, code: "CONFLICT" });
  }
  expect(stack.planetscale.stats().requests).toBe(q1);
  // QStash retries a delivery with a fresh signature (new jti): that is not a replay.
  expect((await deliver(t, body, {}, messageId)).status).toBe(200);
});

/**
 * The dead-letter queue through /admin (issue 17 item 7), against the QStash stand-in through the
 * production client: a message whose delivery fails (a target answering 500, no retries) is
 * dead-lettered; GET /admin/dlq lists it with the failed callback's status and scrubbed excerpts;
 * a re-drive delivers it again to the now-healthy target and removes it; delete removes it; the
 * bulk actions work per destination, and a bulk delete is never implied.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { EXCERPT_CHARS } from "../../src/services/dlq.ts";
import { deadLetter, deadLettersOf, type FailingTarget, SECRET, startFailingTarget } from "../support/dlq.ts";
import { call } from "../support/http.ts";
import { createTestApp, eventually, type TestApp } from "../support/stack.ts";

let t: TestApp;
let target: FailingTarget;
let token: string;

beforeAll(async () => {
  t = await createTestApp();
  token = `Bearer ${t.deps.config.ADMIN_TOKEN}`;
  target = startFailingTarget();
});
afterAll(async () => {
  await target.stop();
});

describe("GET /admin/dlq", () => {
  test("a message whose delivery failed is listed with the callback's status and scrubbed, clipped excerpts of its answer and its body", async () => {
    const url = target.url();
    const [messageId] = await deadLetter(t, url);
    const [m, ...rest] = await deadLettersOf(t, url);
    expect(rest).toEqual([]);
    expect(m).toMatchObject({ messageId, url, responseStatus: 500 });
    expect(m?.responseExcerpt).toStartWith("upstream exploded; authorization: ***");
    expect(m?.responseExcerpt.length).toBeLessThanOrEqual(EXCERPT_CHARS + 1);
    expect(m?.responseExcerpt).toEndWith("…");
    expect(m?.bodyExcerpt).toStartWith('{"orderId":"90","note":"password=***');
    for (const text of [m?.responseExcerpt, m?.bodyExcerpt]) {
      expect(text).not.toContain(SECRET);
      expect(text).not.toContain("hunter2");
    }
  });

  test("pages by count and cursor, newest first", async () => {
    const url = target.url();
    const ids = await deadLetter(t, url, 3);
    const page = async (q: string) =>
      (
        await call<{ messages: { messageId: string }[]; cursor: string | null }>(
          t.app,
          "GET",
          `/admin/dlq?url=${encodeURIComponent(url)}&count=2${q}`,
          { token },
        )
      ).body.data;
    const first = await page("");
    expect(first?.messages).toHaveLength(2);
    expect(first?.cursor).toBeString();
    const second = await page(`&cursor=${encodeURIComponent(first?.cursor ?? "")}`);
    expect(second?.messages).toHaveLength(1);
    expect(second?.cursor).toBeNull();
    expect([...(first?.messages ?? []), ...(second?.messages ?? [])].map((m) => m.messageId).sort()).toEqual(
      [...ids].sort(),
    );
  });

  test("is operator-only, and a malformed filter, count or id is a 400", async () => {
    expect((await call(t.app, "GET", "/admin/dlq")).status).toBe(401);
    for (const path of [
      "/admin/dlq?url=ftp%3A%2F%2Fx",
      "/admin/dlq?count=0",
      "/admin/dlq?count=101",
      `/admin/dlq?cursor=${"c".repeat(201)}`,
    ]) {
      expect([path, (await call(t.app, "GET", path, { token })).status]).toEqual([path, 400]);
    }
    expect((await call(t.app, "POST", "/admin/dlq/bad%20id/retry", { token })).status).toBe(400);
    expect((await call(t.app, "DELETE", "/admin/dlq/bad%20id", { token })).status).toBe(400);
  });
});

describe("re-drive and delete", () => {
  test("re-driving one delivers it again to the now-healthy target and removes it; a retry with its Idempotency-Key replays, another is NOT_FOUND", async () => {
    const url = target.url();
    const [original] = await deadLetter(t, url);
    const [entry] = await deadLettersOf(t, url);
    target.heal(url);
    const headers = { "idempotency-key": `redrive-${crypto.randomUUID()}` };
    const res = await call<{ messageId: string }>(t.app, "POST", `/admin/dlq/${entry?.dlqId}/retry`, {
      token,
      headers,
    });
    expect(res.body.success).toBe(true);
    const redriven = res.body.data?.messageId;
    expect(redriven).toBeString();
    expect(redriven).not.toBe(original);
    await eventually("the re-driven message delivered", async () => target.delivered(url).length === 1);
    expect(JSON.parse(target.delivered(url)[0] ?? "{}")).toMatchObject({ orderId: "90" });
    expect(await deadLettersOf(t, url)).toEqual([]);
    const replay = await call<{ messageId: string }>(t.app, "POST", `/admin/dlq/${entry?.dlqId}/retry`, {
      token,
      headers,
    });
    expect([replay.headers.get("idempotent-replayed"), replay.body.data?.messageId]).toEqual(["true", redriven]);
    const again = await call(t.app, "POST", `/admin/dlq/${entry?.dlqId}/retry`, { token });
    expect(again.body).toMatchObject({ success: false, code: "NOT_FOUND" });
    // Delivered once: the entry left the DLQ with its re-drive.
    expect(target.delivered(url)).toHaveLength(1);
  });

  test("deleting one removes it (nothing is delivered); deleting it again is NOT_FOUND", async () => {
    const url = target.url();
    await deadLetter(t, url);
    const [entry] = await deadLettersOf(t, url);
    const res = await call(t.app, "DELETE", `/admin/dlq/${entry?.dlqId}`, { token });
    expect(res.body).toEqual({ success: true });
    expect(await deadLettersOf(t, url)).toEqual([]);
    expect((await call(t.app, "DELETE", `/admin/dlq/${entry?.dlqId}`, { token })).body).toMatchObject({
      success: false,
      code: "NOT_FOUND",
    });
    expect(target.delivered(url)).toEqual([]);
  });

  test("re-drive all of one destination leaves the others; a bulk delete needs all=true or a url", async () => {
    const [a, b] = [target.url(), target.url()];
    await deadLetter(t, a, 2);
    await deadLetter(t, b);
    target.heal(a);
    const all = await call<{ done: number; messageIds: string[]; more: boolean }>(
      t.app,
      "POST",
      `/admin/dlq/retry-all?url=${encodeURIComponent(a)}`,
      { token },
    );
    expect(all.body.data).toMatchObject({ done: 2, more: false });
    expect(all.body.data?.messageIds).toHaveLength(2);
    await eventually("both re-driven messages delivered", async () => target.delivered(a).length === 2);
    expect(await deadLettersOf(t, a)).toEqual([]);
    expect(await deadLettersOf(t, b)).toHaveLength(1);
    const implied = await call(t.app, "DELETE", "/admin/dlq", { token });
    expect([implied.status, implied.body.code]).toEqual([400, "INVALID_INPUT"]);
    expect(await deadLettersOf(t, b)).toHaveLength(1);
    const del = await call<{ done: number }>(t.app, "DELETE", `/admin/dlq?url=${encodeURIComponent(b)}`, { token });
    expect(del.body.data?.done).toBe(1);
    expect(await deadLettersOf(t, b)).toEqual([]);
  });
});

describe("the reference", () => {
  test("documents the DLQ routes with their data schemas, NOT_FOUND outcomes and the operator scheme", async () => {
    const doc = (await (await t.app.request("/openapi.json")).json()) as {
      paths: Record<string, Record<string, { security?: unknown; responses: Record<string, unknown> }>>;
    };
    const ops = [
      ["get", "/admin/dlq"],
      ["post", "/admin/dlq/retry-all"],
      ["post", "/admin/dlq/{id}/retry"],
      ["delete", "/admin/dlq/{id}"],
      ["delete", "/admin/dlq"],
    ] as const;
    for (const [method, path] of ops) {
      const op = doc.paths[path]?.[method];
      expect([method, path, op?.security]).toEqual([method, path, [{ operatorBearer: [] }]]);
    }
    const list = JSON.stringify(doc.paths["/admin/dlq"]?.get?.responses["200"]);
    for (const field of ["dlqId", "responseStatus", "responseExcerpt", "bodyExcerpt", "cursor"])
      expect(list).toContain(`"${field}"`);
    expect(JSON.stringify(doc.paths["/admin/dlq/{id}/retry"]?.post?.responses["200"])).toContain("NOT_FOUND");
  });
});

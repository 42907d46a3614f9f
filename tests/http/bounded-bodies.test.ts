/**
 * Bodies that cost nothing (issue 16 item 1): a url-encoded form and a multipart body are bounded in
 * bytes and in pieces before anything parses them. Before: `POST /console/login` ran URLSearchParams
 * over a 1 MB form of 110,000 pairs (60–78 ms of CPU each), and an upload's 78,000 parts were parsed
 * before the file check — ten such requests in flight stalled every other request of the isolate.
 */
import { describe, expect, test } from "bun:test";
import { MAX_FORM_PAIRS } from "../../src/http/body.ts";
import { MAX_UPLOAD_PARTS } from "../../src/routes/upload.ts";
import { newUser } from "../support/social.ts";
import { createTestApp, getStack } from "../support/stack.ts";

const FORM = {
  "content-type": "application/x-www-form-urlencoded",
  origin: new URL(String((await getStack()).env.PUBLIC_URL)).origin,
};

describe("bounded bodies", () => {
  test("the console sign-in form: 1 MB is a 413 without being read whole; too many pairs is refused as no form; a normal one works", async () => {
    const t = await createTestApp({ OPERATOR_AUTH_FAILURES: "0" });
    const huge = Array.from({ length: 110_000 }, (_, i) => `k${i}=v`).join("&");
    const res = await t.app.request("/console/login", { method: "POST", headers: FORM, body: huge });
    expect(res.status).toBe(413);
    // Chunked (no Content-Length): the read stops at the cap.
    const chunked = new ReadableStream<Uint8Array>({
      start(ctl) {
        for (let i = 0; i < 100; i++) ctl.enqueue(new TextEncoder().encode(`${"a".repeat(10_000)}&`));
        ctl.close();
      },
    });
    expect(
      (
        await t.app.request("/console/login", {
          method: "POST",
          headers: FORM,
          body: chunked,
          duplex: "half",
        } as RequestInit)
      ).status,
    ).toBe(413);
    const manyPairs = `token=${t.deps.config.ADMIN_TOKEN}&${Array.from({ length: MAX_FORM_PAIRS + 1 }, (_, i) => `p${i}=1`).join("&")}`;
    expect((await t.app.request("/console/login", { method: "POST", headers: FORM, body: manyPairs })).status).toBe(
      401,
    );
    const ok = await t.app.request("/console/login", {
      method: "POST",
      headers: FORM,
      body: `token=${encodeURIComponent(t.deps.config.ADMIN_TOKEN)}`,
    });
    expect(ok.status).toBe(303);
  });

  test("an upload with more than MAX_UPLOAD_PARTS parts is a 413 before the multipart parser runs", async () => {
    const t = await createTestApp();
    const user = await newUser(t);
    const boundary = "----bounded";
    const part = (i: number) => `--${boundary}\r\ncontent-disposition: form-data; name="f${i}"\r\n\r\nx\r\n`;
    const body = `${Array.from({ length: 78_000 }, (_, i) => part(i)).join("")}--${boundary}--\r\n`;
    const res = await t.app.request("/api/upload/blog", {
      method: "POST",
      headers: { authorization: user.token, "content-type": `multipart/form-data; boundary=${boundary}` },
      body,
    });
    expect(res.status).toBe(413);
    expect(((await res.json()) as { errorMsg: string }).errorMsg).toBe(
      `at most ${MAX_UPLOAD_PARTS} parts in a multipart body`,
    );
    // Streamed (no Content-Length): refused once part 9 has passed, the rest never read.
    let pulled = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(ctl) {
        if (pulled >= 10_000) return ctl.close();
        ctl.enqueue(new TextEncoder().encode(part(pulled++)));
      },
    });
    const streamed = await t.app.request("/api/upload/blog", {
      method: "POST",
      headers: { authorization: user.token, "content-type": `multipart/form-data; boundary=${boundary}` },
      body: stream,
      duplex: "half",
    } as RequestInit);
    expect(streamed.status).toBe(413);
    expect(pulled).toBeLessThan(100);
    // A body that is not multipart at all: 415 before it is read (tests/http/content-types.test.ts).
    expect(
      (
        await t.app.request("/api/upload/blog", {
          method: "POST",
          headers: { authorization: user.token, "content-type": "text/plain" },
          body: "x",
        })
      ).status,
    ).toBe(415);
  });
});

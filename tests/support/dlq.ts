/**
 * Dead letters for tests, made for real: a tiny HTTP target on a free port that answers 500
 * (with a body quoting a secret) until a path is healed, and a publish through the app's own
 * QStash port with no retries, so the stand-in dead-letters the message after its one failed
 * delivery. Every test uses a path of its own and filters the shared DLQ by that URL.
 */
import type { TestApp } from "./stack.ts";
import { eventually } from "./stack.ts";
import { call } from "./http.ts";

/** In the target's failure answer and in published bodies: must never reach an operator. */
export const SECRET = "sk_live_0123456789abcdefghijABCDEFGHIJ";

export interface FailingTarget {
  base: string;
  /** A fresh URL on the target (fails until healed). */
  url(): string;
  /** From now on `url` answers 200. */
  heal(url: string): void;
  /** Bodies delivered with a 200, by URL. */
  delivered(url: string): string[];
  stop(): Promise<void>;
}

export function startFailingTarget(): FailingTarget {
  const healed = new Set<string>();
  const bodies = new Map<string, string[]>();
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: async (req) => {
      const body = await req.text();
      const url = req.url;
      if (!healed.has(url))
        return new Response(`upstream exploded; authorization: Bearer ${SECRET}; ${"lorem ipsum ".repeat(200)}`, {
          status: 500,
        });
      bodies.set(url, [...(bodies.get(url) ?? []), body]);
      return new Response("ok");
    },
  });
  const base = `http://127.0.0.1:${server.port}`;
  return {
    base,
    url: () => `${base}/hook/${crypto.randomUUID().slice(0, 8)}`,
    heal: (url) => healed.add(url),
    delivered: (url) => bodies.get(url) ?? [],
    stop: async () => {
      await server.stop(true);
    },
  };
}

export interface DeadLetterView {
  dlqId: string;
  messageId: string;
  url: string;
  responseStatus: number | null;
  responseExcerpt: string;
  bodyExcerpt: string;
}

const operator = (t: TestApp) => `Bearer ${t.deps.config.ADMIN_TOKEN}`;

/** GET /admin/dlq?url=…: the entries of one destination (first page). */
export async function deadLettersOf(t: TestApp, url: string): Promise<DeadLetterView[]> {
  const res = await call<{ messages: DeadLetterView[]; cursor: string | null }>(
    t.app,
    "GET",
    `/admin/dlq?url=${encodeURIComponent(url)}`,
    { token: operator(t) },
  );
  if (res.status !== 200 || !res.body.success)
    throw new Error(`GET /admin/dlq → ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.data?.messages ?? [];
}

/** Publishes `n` messages to `url` with no retries and waits until all are dead-lettered; returns their message ids. */
export async function deadLetter(t: TestApp, url: string, n = 1): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const res = await t.deps.queue.publishJSON({
      url,
      body: { orderId: `9${i}`, note: `password=hunter2 ${"dolor sit ".repeat(60)}` },
      retries: 0,
    });
    ids.push(res.messageId);
  }
  await eventually(`${n} dead letter(s) for ${url}`, async () => (await deadLettersOf(t, url)).length >= n, 15_000);
  return ids;
}

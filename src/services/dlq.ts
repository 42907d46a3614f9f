/**
 * The QStash dead-letter queue for operators (GET/POST/DELETE /admin/dlq…, /console/dlq): messages
 * whose delivery failed past their retries — an order drain or close whose callback kept
 * answering 5xx, a writer that was down — listed with the failed callback's status and an excerpt
 * of its answer, re-driven (QStash publishes a fresh copy, due now, retry counter reset, and
 * removes the entry) or deleted. Backed by the QStash DLQ API through the production client
 * (deps.dlq: `client.dlq` of @upstash/qstash, behind the qstash breaker), hosted or the local
 * stand-in alike.
 *
 * Re-driving is safe for our own messages: every /internal route is idempotent (writer inserts on
 * the order id, close is a status CAS, a release is once per order), so a re-driven message that
 * had in fact been handled is a no-op.
 *
 * What is shown is scrubbed (util/scrub.ts) and clipped: a callback's error page may quote
 * headers or a request, and a message URL may carry a credential.
 */
import { QstashError } from "@upstash/qstash";
import { z } from "zod";
import type { Deps } from "../deps.ts";
import { scrub } from "../util/scrub.ts";

type DlqMessage = Awaited<ReturnType<Deps["dlq"]["listMessages"]>>["messages"][number];

/** A DLQ entry id as QStash issues them (the stand-in: `<epoch ms>-<hex>`): what a route accepts before asking QStash. */
export const DlqId = z.string().regex(/^[A-Za-z0-9_.:-]{1,128}$/, "not a dead-letter id");

/** Characters of a body shown at most (after scrubbing). */
export const EXCERPT_CHARS = 300;
/** Of a body, this much is scrubbed before clipping (a credential cut at the clip would no longer look like one). */
const SCRUB_WINDOW = 4096;
/** Entries per list page at most (QStash's own page is up to 100 by default). */
export const DLQ_PAGE_MAX = 100;
/** Pages of up to DLQ_PAGE_MAX entries one "all" action works through per call; `more` says when some are left. */
export const BULK_MAX_PAGES = 10;

export interface DeadLetter {
  /** The DLQ entry's id (what re-drive and delete take). */
  dlqId: string;
  /** The dead message's id. */
  messageId: string;
  /** Its destination, scrubbed. */
  url: string;
  method: string;
  /** Epoch ms the message was published. */
  createdAt: number;
  /** Retries it had (after the first attempt). */
  maxRetries: number | null;
  /** HTTP status of the last failed delivery; null when it got no answer (timeout, refused connection). */
  responseStatus: number | null;
  /** The start of that answer's body, scrubbed ("" when empty; `(binary, N bytes)` when not UTF-8). */
  responseExcerpt: string;
  /** Why the last attempt failed when there was no answer (the stand-in's `error`), scrubbed. */
  error: string | null;
  /** The start of the message body, scrubbed. */
  bodyExcerpt: string;
  labels: string[];
}

export interface DeadLetterPage {
  messages: DeadLetter[];
  /** Pass back for the next page; null on the last. */
  cursor: string | null;
}

/** Narrows the list and the bulk actions; no filter = every entry. */
export interface DlqFilter {
  /** Exact destination URL. */
  url?: string;
}

function clip(text: string): string {
  const clean = scrub(text.length > SCRUB_WINDOW ? text.slice(0, SCRUB_WINDOW) : text);
  return clean.length > EXCERPT_CHARS ? `${clean.slice(0, EXCERPT_CHARS)}…` : clean;
}

function excerpt(text: string | undefined, base64: string | undefined): string {
  if (text !== undefined && text !== "") return clip(text);
  if (base64) return `(binary, ${Math.floor((base64.replace(/=+$/, "").length * 3) / 4)} bytes)`;
  return "";
}

function deadLetterOf(m: DlqMessage): DeadLetter {
  const extra = m as DlqMessage & { error?: unknown; labels?: unknown; label?: unknown };
  const labels = Array.isArray(extra.labels)
    ? extra.labels.map(String)
    : typeof extra.label === "string"
      ? [extra.label]
      : [];
  return {
    dlqId: m.dlqId,
    messageId: m.messageId,
    url: clip(m.url),
    method: m.method ?? "POST",
    createdAt: m.createdAt,
    maxRetries: typeof m.maxRetries === "number" ? m.maxRetries : null,
    responseStatus: typeof m.responseStatus === "number" ? m.responseStatus : null,
    responseExcerpt: excerpt(m.responseBody, m.responseBodyBase64),
    error: typeof extra.error === "string" && extra.error !== "" ? clip(extra.error) : null,
    bodyExcerpt: excerpt(m.body, m.bodyBase64),
    labels,
  };
}

/** One page of the DLQ, newest first. */
export async function listDeadLetters(
  deps: Pick<Deps, "dlq">,
  opts: DlqFilter & { cursor?: string; count?: number } = {},
): Promise<DeadLetterPage> {
  const count = Math.min(DLQ_PAGE_MAX, Math.max(1, opts.count ?? 50));
  const page = await deps.dlq.listMessages({
    count,
    ...(opts.cursor ? { cursor: opts.cursor } : {}),
    ...(opts.url ? { filter: { url: opts.url } } : {}),
  });
  return { messages: page.messages.map(deadLetterOf), cursor: page.cursor || null };
}

const isNotFound = (err: unknown) => err instanceof QstashError && err.status === 404;

export type RedriveOutcome = { ok: true; messageId: string } | { ok: false; code: "NOT_FOUND" };
export type DeleteOutcome = { ok: true } | { ok: false; code: "NOT_FOUND" };

/** Re-drives one entry: QStash publishes a fresh copy (new message id, due now) and drops the entry. */
export async function redriveDeadLetter(deps: Pick<Deps, "dlq">, dlqId: string): Promise<RedriveOutcome> {
  try {
    const { responses } = await deps.dlq.retry([dlqId]);
    const messageId = responses[0]?.messageId;
    return messageId ? { ok: true, messageId } : { ok: false, code: "NOT_FOUND" };
  } catch (err) {
    if (isNotFound(err)) return { ok: false, code: "NOT_FOUND" };
    throw err;
  }
}

/** Deletes one entry (by the bulk endpoint's `dlqIds`, which counts what it deleted: an unknown id is 0, not an error). */
export async function deleteDeadLetter(deps: Pick<Deps, "dlq">, dlqId: string): Promise<DeleteOutcome> {
  try {
    const { deleted } = await deps.dlq.delete([dlqId]);
    return deleted > 0 ? { ok: true } : { ok: false, code: "NOT_FOUND" };
  } catch (err) {
    if (isNotFound(err)) return { ok: false, code: "NOT_FOUND" };
    throw err;
  }
}

export interface BulkOutcome {
  /** Entries re-driven (or deleted) by this call. */
  done: number;
  /** The new messages' ids (re-drive only). */
  messageIds: string[];
  /** Entries were left after BULK_MAX_PAGES pages: call again. */
  more: boolean;
}

type BulkRequest =
  | { all: true; count: number; cursor?: string }
  | { filter: { url: string }; count: number; cursor?: string };

/** Pages through `act` (QStash processes at most `count` per call and hands back a cursor while some are left). */
async function bulk(
  filter: DlqFilter,
  act: (req: BulkRequest) => Promise<{ done: number; ids: string[]; cursor?: string }>,
): Promise<BulkOutcome> {
  const out: BulkOutcome = { done: 0, messageIds: [], more: false };
  let cursor: string | undefined;
  for (let page = 0; page < BULK_MAX_PAGES; page++) {
    const base = filter.url
      ? { filter: { url: filter.url }, count: DLQ_PAGE_MAX }
      : { all: true as const, count: DLQ_PAGE_MAX };
    const res = await act(cursor ? { ...base, cursor } : base);
    out.done += res.done;
    out.messageIds.push(...res.ids);
    cursor = res.cursor || undefined;
    if (!cursor) return out;
  }
  out.more = true;
  return out;
}

/** Re-drives every entry (or those matching `filter`). */
export async function redriveAll(deps: Pick<Deps, "dlq">, filter: DlqFilter = {}): Promise<BulkOutcome> {
  return await bulk(filter, async (req) => {
    const res = await deps.dlq.retry(req);
    return { done: res.responses.length, ids: res.responses.map((r) => r.messageId), cursor: res.cursor };
  });
}

/** Deletes every entry (or those matching `filter`). */
export async function deleteAll(deps: Pick<Deps, "dlq">, filter: DlqFilter = {}): Promise<BulkOutcome> {
  return await bulk(filter, async (req) => {
    const res = await deps.dlq.delete(req);
    return { done: res.deleted, ids: [], cursor: res.cursor };
  });
}

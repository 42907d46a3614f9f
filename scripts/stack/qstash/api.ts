/**
 * The QStash v2 HTTP API of the stand-in, as the unmodified `@upstash/qstash` 2.12.0 SDK calls it
 * (wire format: docs/protocols.md §3): publish, batch, messages get/cancel, the DLQ
 * (list, get, delete, re-drive) and `GET /v2/keys`. Validates each request, turns publishes into
 * drafts for the store, and answers in the hosted API's shapes.
 *
 * Routing is on the raw URL: a publish destination sits unencoded in the path and keeps its `//`.
 * Times: `timeScale` multiplies Upstash-Delay and callback delays; Upstash-Not-Before (an
 * absolute instant), timeouts and the dedup window are real time.
 */
import { createHash } from "node:crypto";
import type { DeliveryLoop, QstashStats } from "./delivery.ts";
import { compileRetryDelay, RetryExprError } from "./retry-expr.ts";
import {
  type CallbackSpec,
  type DlqRecord,
  type Draft,
  fromB64,
  headersToMulti,
  type QstashStore,
  randomId,
  type StoredMessage,
} from "./store.ts";

/** What the routes need: the state, the loop to wake, and the instance's settings. */
export interface ApiContext {
  store: QstashStore;
  delivery: DeliveryLoop;
  stats: QstashStats;
  token: string;
  currentSigningKey: string;
  nextSigningKey: string;
  timeScale: number;
  pollIntervalMs: number;
  /** Retries when the publisher sends no Upstash-Retries. */
  defaultRetries: number;
  /** Longest Upstash-Delay accepted, ms (before timeScale). */
  maxDelayMs: number;
}

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

function json(status: number, value: unknown): Response {
  return new Response(JSON.stringify(value), { status, headers: { "content-type": "application/json" } });
}

const MAX_RETRIES = 100;
const DAY_MS = 86_400_000;

/** Headers that describe a connection, not a message: never forwarded to a destination. */
const HOP_BY_HOP = new Set([
  "host",
  "content-length",
  "connection",
  "keep-alive",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
  "proxy-authorization",
  "proxy-connection",
]);

// ---------------------------------------------------------------------------------------------
// Publish headers

/**
 * Parses `10s`, `2m`, `1h`, `1d`, `500ms`, Go-style sequences such as `1h30m`, and bare numbers
 * (seconds). Returns milliseconds; throws HttpError(400) on anything else.
 */
export function parseDuration(raw: string, what: string): number {
  const s = raw.trim();
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s) * 1000;
  const unitMs: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: DAY_MS };
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/y;
  let total = 0;
  let pos = 0;
  while (pos < s.length) {
    re.lastIndex = pos;
    const m = re.exec(s);
    if (!m || m[1] === undefined || m[2] === undefined) throw new HttpError(400, `invalid ${what}: ${raw}`);
    total += Number(m[1]) * (unitMs[m[2]] ?? NaN);
    pos = re.lastIndex;
  }
  if (s.length === 0 || !Number.isFinite(total)) throw new HttpError(400, `invalid ${what}: ${raw}`);
  return total;
}

function describeDuration(ms: number): string {
  if (!Number.isFinite(ms)) return "unlimited";
  return ms % DAY_MS === 0 ? `${ms / DAY_MS} days` : `${ms} ms`;
}

/** Case-insensitive view of publish headers: a Request's Headers or a batch entry's record. */
type HeaderGetter = { get(name: string): string | undefined; entries(): [string, string][] };

function headerGetterFromRecord(rec: Record<string, string>): HeaderGetter {
  const lower = new Map<string, string>();
  for (const [k, v] of Object.entries(rec)) lower.set(k.toLowerCase(), v);
  return { get: (n) => lower.get(n.toLowerCase()), entries: () => [...lower.entries()] };
}

function headerGetterFromHeaders(h: Headers): HeaderGetter {
  return { get: (n) => h.get(n) ?? undefined, entries: () => [...h.entries()] };
}

function parseRetries(v: string | undefined, fallback: number): number {
  if (v === undefined || v.trim() === "") return fallback;
  if (!/^\d+$/.test(v.trim())) throw new HttpError(400, `invalid Upstash-Retries: ${v}`);
  return Math.min(MAX_RETRIES, Number(v.trim()));
}

function parseMethod(v: string | undefined): string {
  const m = (v ?? "POST").trim().toUpperCase() || "POST";
  if (!/^[A-Z]{1,16}$/.test(m)) throw new HttpError(400, `invalid Upstash-Method: ${v}`);
  return m;
}

function parseDestination(dest: string): string {
  let u: URL;
  try {
    u = new URL(dest);
  } catch {
    // QStash treats a non-URL as a URL-group or API name; this stand-in has neither.
    throw new HttpError(404, `url group or api '${dest}' not found (local QStash only delivers to http(s) URLs)`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") {
    throw new HttpError(400, `invalid destination url: ${dest}`);
  }
  return dest;
}

/** Content-Type plus de-prefixed `<prefix>forward-*` headers, minus hop-by-hop ones. */
function forwardedHeaders(h: HeaderGetter, prefix: string, includeContentType: boolean): [string, string][] {
  const out: [string, string][] = [];
  const fwd = `${prefix}forward-`;
  for (const [k, v] of h.entries()) {
    const name = k.toLowerCase();
    if (includeContentType && name === "content-type") out.push([name, v]);
    else if (name.startsWith(fwd) && name.length > fwd.length) {
      const target = name.slice(fwd.length);
      if (!HOP_BY_HOP.has(target)) out.push([target, v]);
    }
  }
  return out;
}

function parseCallback(
  h: HeaderGetter,
  which: "callback" | "failure-callback",
  defaultRetries: number,
): CallbackSpec | undefined {
  const url = h.get(`upstash-${which}`);
  if (url === undefined || url.trim() === "") return undefined;
  const p = `upstash-${which}-`;
  const timeout = h.get(`${p}timeout`);
  const delay = h.get(`${p}delay`);
  return {
    url: parseDestination(url.trim()),
    method: parseMethod(h.get(`${p}method`)),
    retries: parseRetries(h.get(`${p}retries`), defaultRetries),
    delayMs: delay ? parseDuration(delay, `Upstash-${which}-Delay`) : 0,
    timeoutMs: timeout ? parseDuration(timeout, `Upstash-${which}-Timeout`) : undefined,
    headers: forwardedHeaders(h, p, false),
  };
}

/** Validates one publish (from HTTP headers or a batch entry) into a message not yet stored. */
function draftFromPublish(
  ctx: ApiContext,
  destRaw: string,
  h: HeaderGetter,
  body: Uint8Array,
  callerIp: string | undefined,
): Draft {
  const url = parseDestination(destRaw);
  const now = Date.now();
  const method = parseMethod(h.get("upstash-method"));
  const notBeforeRaw = h.get("upstash-not-before");
  const delayRaw = h.get("upstash-delay");
  let dueAt = now;
  if (notBeforeRaw !== undefined && notBeforeRaw.trim() !== "") {
    // Absolute instant: deliberately not scaled by timeScale.
    if (!/^\d+$/.test(notBeforeRaw.trim())) throw new HttpError(400, `invalid Upstash-Not-Before: ${notBeforeRaw}`);
    dueAt = Math.max(now, Number(notBeforeRaw.trim()) * 1000);
  } else if (delayRaw !== undefined && delayRaw.trim() !== "") {
    const ms = parseDuration(delayRaw, "Upstash-Delay");
    // Hosted limits are per plan (docs qstash/features/delay): free 7 days, pay-as-you-go 1 year.
    if (ms > ctx.maxDelayMs)
      throw new HttpError(
        400,
        `invalid Upstash-Delay: ${delayRaw} exceeds the maximum allowed delay of ${describeDuration(ctx.maxDelayMs)}`,
      );
    dueAt = now + ms * ctx.timeScale;
  }
  const retryDelay = h.get("upstash-retry-delay")?.trim() || undefined;
  if (retryDelay !== undefined) {
    try {
      compileRetryDelay(retryDelay); // validate now, 400 on error
    } catch (e) {
      if (e instanceof RetryExprError) throw new HttpError(400, e.message);
      throw e;
    }
  }
  const timeoutRaw = h.get("upstash-timeout");
  const timeoutMs = timeoutRaw?.trim() ? parseDuration(timeoutRaw, "Upstash-Timeout") : undefined;
  if (timeoutMs !== undefined && timeoutMs <= 0) throw new HttpError(400, `invalid Upstash-Timeout: ${timeoutRaw}`);
  const headers = forwardedHeaders(h, "upstash-", true);
  const labelRaw = h.get("upstash-label");
  const labels = labelRaw
    ? labelRaw
        .split(",")
        .map((s) => s.trim())
        .filter(Boolean)
    : undefined;
  if (h.get("upstash-queue-name") || h.get("upstash-flow-control-key")) {
    throw new HttpError(501, "queues and flow control are not supported by local QStash");
  }

  const msg: StoredMessage = {
    id: randomId("msg_"),
    url,
    method,
    headers,
    bodyB64: Buffer.from(body).toString("base64"),
    createdAt: now,
    notBefore: Math.round(dueAt),
    maxRetries: parseRetries(h.get("upstash-retries"), ctx.defaultRetries),
    retried: 0,
    retryDelay,
    timeoutMs,
    callback: parseCallback(h, "callback", ctx.defaultRetries),
    failureCallback: parseCallback(h, "failure-callback", ctx.defaultRetries),
    labels,
    callerIp,
  };

  // Dedup keys are scoped to the destination so unrelated endpoints never swallow each other.
  let dedupKey: string | undefined;
  const dedupId = h.get("upstash-deduplication-id");
  if (dedupId !== undefined && dedupId !== "") {
    dedupKey = createHash("sha256").update(`id\0${url}\0${dedupId}`).digest("hex");
  } else if ((h.get("upstash-content-based-deduplication") ?? "").trim().toLowerCase() === "true") {
    const hash = createHash("sha256").update(`content\0${url}\0${method}\0`);
    for (const [k, v] of [...headers].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)))
      hash.update(`${k}:${v}\n`);
    hash.update(body);
    dedupKey = hash.digest("hex");
  }
  return { msg, dedupKey };
}

async function enqueue(ctx: ApiContext, d: Draft): Promise<{ messageId: string; deduplicated: boolean }> {
  const r = await ctx.store.enqueue(d);
  if (!r.deduplicated) {
    ctx.stats.published++;
    if (d.msg.notBefore <= Date.now() + ctx.pollIntervalMs) ctx.delivery.kick();
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Response shapes

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/** `{name: text}` for a UTF-8 body, `{nameBase64: b64}` otherwise, `{}` when empty. */
function bodyFields(bytes: Uint8Array, name: string): Record<string, string> {
  if (bytes.length === 0) return {};
  try {
    return { [name]: strictUtf8.decode(bytes) };
  } catch {
    return { [`${name}Base64`]: Buffer.from(bytes).toString("base64") };
  }
}

function publicMessage(m: StoredMessage): Record<string, unknown> {
  return {
    messageId: m.id,
    url: m.url,
    method: m.method,
    header: headersToMulti(m.headers),
    ...bodyFields(fromB64(m.bodyB64), "body"),
    maxRetries: m.maxRetries,
    ...(m.retryDelay ? { retryDelayExpression: m.retryDelay } : {}),
    notBefore: m.notBefore,
    createdAt: m.createdAt,
    ...(m.callback ? { callback: m.callback.url } : {}),
    ...(m.failureCallback ? { failureCallback: m.failureCallback.url } : {}),
    ...(m.callerIp ? { callerIp: m.callerIp } : {}),
    ...(m.labels?.length ? { label: m.labels[0], labels: m.labels } : {}),
  };
}

function publicDlq(r: DlqRecord): Record<string, unknown> {
  const resBytes = r.response.bodyB64 ? fromB64(r.response.bodyB64) : new Uint8Array(0);
  return {
    ...publicMessage(r.message),
    dlqId: r.dlqId,
    ...(r.response.status !== undefined ? { responseStatus: r.response.status } : {}),
    ...(r.response.headers ? { responseHeader: r.response.headers } : {}),
    ...bodyFields(resBytes, "responseBody"),
    ...(r.response.error ? { error: r.response.error } : {}),
  };
}

// ---------------------------------------------------------------------------------------------
// Filters of the DLQ and bulk-cancel endpoints

/**
 * Query parameters of `GET /v2/dlq`, `DELETE /v2/dlq` and `POST /v2/dlq/retry`: the hosted
 * OpenAPI spec's DLQ filters plus what SDK 2.12.0 sends there (`dlqIds` and `count` on all three,
 * `cursor`, `flowControlKey`). No `host`/`path`: the SDK's types note the DLQ endpoint rejects them.
 */
const DLQ_PARAMS = new Set([
  "dlqIds",
  "cursor",
  "count",
  "messageId",
  "url",
  "topicName",
  "scheduleId",
  "queueName",
  "fromDate",
  "toDate",
  "responseStatus",
  "callerIp",
  "label",
  "flowControlKey",
]);

/**
 * Query parameters of `DELETE /v2/messages` (hosted OpenAPI spec). `count` is deprecated there
 * and ignored: one request cancels every match. `callerIP` is the deprecated spelling of
 * `callerIp`. No `messageId`, `responseStatus` or `cursor`.
 */
const CANCEL_PARAMS = new Set([
  "messageIds",
  "topicName",
  "queueName",
  "url",
  "host",
  "path",
  "label",
  "flowControlKey",
  "fromDate",
  "toDate",
  "scheduleId",
  "callerIp",
  "callerIP",
  "async",
  "count",
]);

/**
 * Refuses a parameter the endpoint does not know, as the hosted API does: otherwise a misspelt
 * filter (`?labeel=x`) would silently be no filter, and a bulk delete would act on everything.
 */
function checkParams(q: URLSearchParams, allowed: ReadonlySet<string>, endpoint: string): void {
  for (const name of q.keys()) {
    if (!allowed.has(name))
      throw new HttpError(
        400,
        `unknown query parameter '${name}' for ${endpoint}; accepted: ${[...allowed].join(", ")}`,
      );
  }
}

/** SDK filters arrive as repeated query params; a record matches if every given field matches. */
function matchesFilter(q: URLSearchParams, r: { message: StoredMessage; status?: number; at: number }): boolean {
  const any = (names: string[], value: string | undefined) => {
    const want = names.flatMap((n) => q.getAll(n));
    return want.length === 0 || (value !== undefined && want.includes(value));
  };
  const m = r.message;
  if (!any(["url"], m.url) || !any(["messageId"], m.id) || !any(["callerIp", "callerIP"], m.callerIp)) return false;
  if (!any(["responseStatus"], r.status === undefined ? undefined : String(r.status))) return false;
  // The stand-in has no URL groups, schedules, queues or flow control: such a filter matches nothing.
  for (const unsupported of ["topicName", "scheduleId", "queueName", "flowControlKey"])
    if (!any([unsupported], undefined)) return false;
  const labels = q.getAll("label");
  if (labels.length > 0 && !labels.some((l) => m.labels?.includes(l))) return false;
  const host = q.getAll("host");
  const path = q.getAll("path");
  if (host.length || path.length) {
    let u: URL | undefined;
    try {
      u = new URL(m.url);
    } catch {
      return false;
    }
    if (host.length && !host.includes(u.host)) return false;
    if (path.length && !path.includes(u.pathname)) return false;
  }
  const from = Number(q.get("fromDate") ?? NaN);
  const to = Number(q.get("toDate") ?? NaN);
  if (Number.isFinite(from) && r.at < from) return false;
  if (Number.isFinite(to) && r.at > to) return false;
  return true;
}

function countParam(q: URLSearchParams, def: number): number {
  const n = Number(q.get("count") ?? def);
  return Number.isInteger(n) && n > 0 ? Math.min(n, 1000) : def;
}

// ---------------------------------------------------------------------------------------------
// DLQ

async function selectDlq(ctx: ApiContext, q: URLSearchParams): Promise<DlqRecord[]> {
  const all = await ctx.store.loadDlq();
  const ids = q.getAll("dlqIds");
  if (ids.length > 0) return all.filter((r) => ids.includes(r.dlqId));
  return all.filter((r) => matchesFilter(q, { message: r.message, status: r.response.status, at: r.addedAt }));
}

/**
 * A list cursor names the position after the last entry returned (its addedAt and dlqId in the
 * store's newest-first order), not an offset: deleting or re-driving entries already seen, or
 * new entries arriving, then neither skips nor repeats one on the next page.
 */
function dlqCursor(r: DlqRecord): string {
  return `${r.addedAt}_${r.dlqId}`;
}

function afterCursor(all: DlqRecord[], cursor: string | null): DlqRecord[] {
  if (!cursor) return all;
  const sep = cursor.indexOf("_");
  const at = Number(cursor.slice(0, sep));
  const id = cursor.slice(sep + 1);
  if (sep <= 0 || !Number.isInteger(at)) throw new HttpError(400, `invalid cursor: ${cursor}`);
  return all.filter((r) => r.addedAt < at || (r.addedAt === at && r.dlqId < id));
}

async function listDlq(ctx: ApiContext, q: URLSearchParams): Promise<Response> {
  const rest = afterCursor(await selectDlq(ctx, q), q.get("cursor"));
  const page = rest.slice(0, countParam(q, 100));
  const last = page[page.length - 1];
  const next = last && rest.length > page.length ? dlqCursor(last) : undefined;
  return json(200, { messages: page.map(publicDlq), ...(next ? { cursor: next } : {}) });
}

/** Deletes or re-drives one entry; a re-drive wakes the poller for the new message. */
async function dlqTake(ctx: ApiContext, r: DlqRecord, redrive: boolean): Promise<string | undefined> {
  const id = await ctx.store.dlqTake(r, redrive);
  if (id && redrive) ctx.delivery.kick();
  return id;
}

/** Bulk DLQ delete/retry: dlqIds, or filters (no filter = all), at most `count` per call. */
async function dlqBulk(ctx: ApiContext, q: URLSearchParams, redrive: boolean): Promise<Response> {
  const explicit = q.getAll("dlqIds").length > 0;
  const matched = await selectDlq(ctx, q);
  const limit = explicit ? matched.length : countParam(q, 100);
  const batch = matched.slice(0, limit);
  const done: string[] = [];
  for (const r of batch) {
    const id = await dlqTake(ctx, r, redrive);
    if (id) done.push(id);
  }
  // Processed entries leave the DLQ, so "next page" is simply "call again"; any cursor works.
  const cursor = matched.length > limit ? String(limit) : undefined;
  if (redrive) return json(200, { responses: done.map((messageId) => ({ messageId })), ...(cursor ? { cursor } : {}) });
  return json(200, { deleted: done.length, ...(cursor ? { cursor } : {}) });
}

async function routeDlq(
  ctx: ApiContext,
  seg: string[],
  method: string,
  query: URLSearchParams,
): Promise<Response | undefined> {
  if (seg.length === 1 && method === "GET") {
    checkParams(query, DLQ_PARAMS, "GET /v2/dlq");
    return await listDlq(ctx, query);
  }
  if (seg.length === 1 && method === "DELETE") {
    checkParams(query, DLQ_PARAMS, "DELETE /v2/dlq");
    return await dlqBulk(ctx, query, false);
  }
  if (seg.length === 2 && seg[1] === "retry" && method === "POST") {
    checkParams(query, DLQ_PARAMS, "POST /v2/dlq/retry");
    return await dlqBulk(ctx, query, true);
  }
  if (seg.length === 3 && seg[1] === "retry" && seg[2] && method === "POST") {
    // Hosted single re-drive: 201 with the new message's PublishResponse.
    const r = await ctx.store.getDlq(seg[2]);
    const id = r === null ? undefined : await dlqTake(ctx, r, true);
    if (!id) throw new HttpError(404, `dlq message ${seg[2]} not found`);
    return json(201, { messageId: id });
  }
  if (seg.length === 2 && seg[1] && method === "GET") {
    const r = await ctx.store.getDlq(seg[1]);
    if (r === null) throw new HttpError(404, `dlq message ${seg[1]} not found`);
    return json(200, publicDlq(r));
  }
  if (seg.length === 2 && seg[1] && method === "DELETE") {
    const r = await ctx.store.getDlq(seg[1]);
    if (r === null || !(await dlqTake(ctx, r, false))) throw new HttpError(404, `dlq message ${seg[1]} not found`);
    return new Response(null, { status: 200 });
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Messages

async function routeMessages(
  ctx: ApiContext,
  seg: string[],
  method: string,
  query: URLSearchParams,
): Promise<Response | undefined> {
  const id = seg[1];
  if (seg.length === 2 && id) {
    if (method === "GET") {
      const m = await ctx.store.getMessage(id);
      if (m === null) throw new HttpError(404, `message ${id} not found`);
      return json(200, publicMessage(m));
    }
    if (method === "DELETE") {
      if (!(await ctx.store.cancel(id))) throw new HttpError(404, `message ${id} not found`);
      return json(200, { cancelled: 1 });
    }
  }
  if (seg.length === 1 && method === "DELETE") {
    checkParams(query, CANCEL_PARAMS, "DELETE /v2/messages");
    if (query.get("async") === "true")
      throw new HttpError(501, "async bulk cancel (bulk actions) is not implemented by local QStash");
    // Hosted: messageIds wins over filters; no filter cancels everything; `count` is ignored.
    const ids = query.getAll("messageIds");
    const targets =
      ids.length > 0
        ? ids
        : (await ctx.store.pendingMessages())
            .filter((m) => matchesFilter(query, { message: m, at: m.createdAt }))
            .map((m) => m.id);
    let cancelled = 0;
    for (const target of targets) if (await ctx.store.cancel(target)) cancelled++;
    return json(200, { cancelled });
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Publish and batch

async function readJsonBody(req: Request): Promise<unknown> {
  const text = await req.text();
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new HttpError(400, "malformed JSON body");
  }
}

async function handlePublish(
  ctx: ApiContext,
  req: Request,
  dest: string,
  callerIp: string | undefined,
): Promise<Response> {
  const body = new Uint8Array(await req.arrayBuffer());
  const d = draftFromPublish(ctx, dest, headerGetterFromHeaders(req.headers), body, callerIp);
  const r = await enqueue(ctx, d);
  return r.deduplicated
    ? json(202, { messageId: r.messageId, url: d.msg.url, deduplicated: true })
    : json(200, { messageId: r.messageId, url: d.msg.url });
}

async function handleBatch(ctx: ApiContext, req: Request, callerIp: string | undefined): Promise<Response> {
  const parsed = await readJsonBody(req);
  if (!Array.isArray(parsed)) throw new HttpError(400, "batch body must be a JSON array");
  // Validate every entry before storing any, so a bad entry does not half-publish the batch.
  const drafts: Draft[] = parsed.map((entry: unknown, i) => {
    if (typeof entry !== "object" || entry === null) throw new HttpError(400, `batch entry ${i} is not an object`);
    const e = entry as Record<string, unknown>;
    if (typeof e.destination !== "string" || e.destination === "")
      throw new HttpError(400, `batch entry ${i}: destination is required`);
    if (e.queue !== undefined) throw new HttpError(501, "queues are not supported by local QStash");
    const hdrs: Record<string, string> = {};
    if (e.headers !== undefined && e.headers !== null) {
      if (typeof e.headers !== "object" || Array.isArray(e.headers))
        throw new HttpError(400, `batch entry ${i}: headers must be an object`);
      for (const [k, v] of Object.entries(e.headers as Record<string, unknown>)) {
        if (typeof v !== "string") throw new HttpError(400, `batch entry ${i}: header ${k} must be a string`);
        hdrs[k] = v;
      }
    }
    if (e.body !== undefined && e.body !== null && typeof e.body !== "string")
      throw new HttpError(400, `batch entry ${i}: body must be a string`);
    const body = new TextEncoder().encode(typeof e.body === "string" ? e.body : "");
    return draftFromPublish(ctx, e.destination, headerGetterFromRecord(hdrs), body, callerIp);
  });
  const out = [];
  for (const d of drafts) {
    const r = await enqueue(ctx, d);
    out.push({ messageId: r.messageId, url: d.msg.url, ...(r.deduplicated ? { deduplicated: true } : {}) });
  }
  return json(200, out);
}

// ---------------------------------------------------------------------------------------------

const NOT_IMPLEMENTED = [
  "schedules",
  "queues",
  "enqueue",
  "topics",
  "events",
  "flowControl",
  "globalParallelism",
  "workflows",
  "bulkActions",
];

async function route(ctx: ApiContext, req: Request, callerIp: string | undefined): Promise<Response> {
  const raw = req.url;
  const schemeEnd = raw.indexOf("//");
  const pathStart = raw.indexOf("/", schemeEnd >= 0 ? schemeEnd + 2 : 0);
  const pathAndQuery = pathStart >= 0 ? raw.slice(pathStart) : "/";
  const qIdx = pathAndQuery.indexOf("?");
  const path = qIdx >= 0 ? pathAndQuery.slice(0, qIdx) : pathAndQuery;
  const query = new URLSearchParams(qIdx >= 0 ? pathAndQuery.slice(qIdx + 1) : "");
  const method = req.method.toUpperCase();

  if (!path.startsWith("/v2/")) throw new HttpError(404, `not found: ${method} ${path}`);
  if (req.headers.get("authorization") !== `Bearer ${ctx.token}`) throw new HttpError(401, "Unauthorized");

  // destination = raw path after /v2/publish/ + raw query string (it belongs to the destination).
  if (path.startsWith("/v2/publish/") && method === "POST")
    return await handlePublish(ctx, req, pathAndQuery.slice("/v2/publish/".length), callerIp);
  if (path === "/v2/batch" && method === "POST") return await handleBatch(ctx, req, callerIp);
  if (path === "/v2/keys" && method === "GET")
    return json(200, { current: ctx.currentSigningKey, next: ctx.nextSigningKey });

  const seg = path
    .split("/")
    .slice(2)
    .map((s) => {
      try {
        return decodeURIComponent(s);
      } catch {
        return s;
      }
    });
  const res =
    seg[0] === "messages"
      ? await routeMessages(ctx, seg, method, query)
      : seg[0] === "dlq"
        ? await routeDlq(ctx, seg, method, query)
        : undefined;
  if (res) return res;
  if (seg[0] !== undefined && NOT_IMPLEMENTED.includes(seg[0]))
    throw new HttpError(501, `/v2/${seg[0]} is not implemented by local QStash`);
  throw new HttpError(404, `not found: ${method} ${path}`);
}

/** One request: HttpError -> its status with `{error}`; anything else is logged and a 500. */
export async function handleRequest(ctx: ApiContext, req: Request, callerIp: string | undefined): Promise<Response> {
  try {
    return await route(ctx, req, callerIp);
  } catch (e) {
    if (e instanceof HttpError) return json(e.status, { error: e.message });
    console.error(`[local-qstash] ${req.method} ${req.url}: ${(e as Error).stack ?? String(e)}`);
    return json(500, { error: "internal error" });
  }
}

/** The 503 every request gets while the instance is stopping. */
export function stoppingResponse(): Response {
  return json(503, { error: "local QStash is stopping" });
}

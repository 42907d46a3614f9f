/**
 * Local QStash v2 stand-in: an HTTP server that the unmodified `@upstash/qstash` 2.12.0 SDK talks
 * to (publish, publishJSON, batch, batchJSON, messages.get/cancel, dlq.listMessages/delete/retry,
 * and `GET /v2/keys`), which delivers signed requests to the destinations with retries, backoff and
 * a dead-letter queue. Wire format: /work/shared/docs/protocols.md §3.
 *
 * All state lives in Redis under `keyPrefix` (default "qstash:"), so a new instance started on the
 * same Redis continues where a stopped (or crashed) one left off:
 *
 *   <p>msg:<id>    STRING  JSON StoredMessage; exists while the message is pending or in flight
 *   <p>due         ZSET    id -> unix ms at which the next attempt may start
 *   <p>inflight    ZSET    id -> unix ms at which the current lease expires
 *   <p>leases      HASH    id -> lease token of the attempt that currently owns the message
 *   <p>dedup:<h>   STRING  messageId of the first publish with that dedup key (PX = dedup window)
 *   <p>dlq         ZSET    dlqId -> unix ms when the message entered the DLQ
 *   <p>dlq:<id>    STRING  JSON DlqRecord
 *
 * Invariants (all kept by the Lua scripts below, each of which runs atomically in Redis):
 *   - a pending message id is in exactly one of `due` / `inflight`;
 *   - only the claim script moves an id from `due` to `inflight`, so two instances never start the
 *     same attempt; an expired lease is moved back to `due` (crash mid-delivery => re-delivery,
 *     i.e. at-least-once; a clean stop releases its leases immediately instead);
 *   - an attempt's result is only applied when its lease token is still the current one, so a
 *     stale worker whose lease was taken over cannot double-schedule or double-DLQ a message.
 *
 * Times: `timeScale` multiplies every relative delay (Upstash-Delay, default backoff, the
 * Upstash-Retry-Delay expression, Retry-After). Absolute instants (Upstash-Not-Before), delivery
 * timeouts and the dedup window are real time.
 */
import { createHash, randomBytes } from "node:crypto";
import { RedisClient } from "bun";
import { SignJWT } from "jose";

export interface LocalQstashOptions {
  redisHost: string;
  redisPort: number;
  token: string;
  currentSigningKey: string;
  nextSigningKey: string;
  /** 0/undefined = a free port chosen by the kernel. */
  port?: number;
  hostname?: string;
  /** Prefix of every Redis key this server uses; default "qstash:". */
  keyPrefix?: string;
  /** Multiplies every delay and backoff; 1 = real time, tests use e.g. 0.01. */
  timeScale?: number;
  /** How often the poller looks for due messages when idle; default 100 ms. */
  pollIntervalMs?: number;
  /** Retries when the publisher sends no Upstash-Retries; default 3. */
  defaultRetries?: number;
  /** HTTP timeout of one delivery attempt without Upstash-Timeout; default 30 s. */
  deliveryTimeoutMs?: number;
}

export interface LocalQstashServer {
  url: string;
  port: number;
  stop(): Promise<void>;
  /** Counters of this instance only (not of other instances sharing the Redis). */
  stats(): { published: number; delivered: number; failedAttempts: number; dlq: number };
}

// ---------------------------------------------------------------------------------------------
// Stored shapes

/** Options of a callback / failure callback, taken from Upstash-(Failure-)Callback-* headers. */
interface CallbackSpec {
  url: string;
  method: string;
  retries: number;
  delayMs: number;
  timeoutMs?: number;
  headers: [string, string][];
}

interface StoredMessage {
  id: string;
  url: string;
  method: string;
  /** Headers delivered to the destination (Content-Type and de-prefixed Upstash-Forward-*). */
  headers: [string, string][];
  bodyB64: string;
  createdAt: number;
  /** Unix ms of the first attempt. */
  notBefore: number;
  maxRetries: number;
  /** Attempts that already failed (= Upstash-Retried of the next attempt). */
  retried: number;
  retryDelay?: string;
  timeoutMs?: number;
  callback?: CallbackSpec;
  failureCallback?: CallbackSpec;
  labels?: string[];
  callerIp?: string;
  /** Set on callback messages so they never trigger callbacks of their own. */
  isCallback?: boolean;
}

interface AttemptResponse {
  status?: number;
  headers?: Record<string, string[]>;
  bodyB64?: string;
  error?: string;
}

interface DlqRecord {
  dlqId: string;
  addedAt: number;
  message: StoredMessage;
  response: AttemptResponse;
}

// ---------------------------------------------------------------------------------------------
// Lua scripts. Each one is the only writer of the keys it touches for its transition.

/** KEYS: msg, due[, dedup]  ARGV: json, dueMs, id, dedupTtlMs -> {1,id} | {0,existingId} */
const ENQUEUE_LUA = `
if #KEYS >= 3 then
  local ok = redis.call('SET', KEYS[3], ARGV[3], 'NX', 'PX', ARGV[4])
  if not ok then return {0, redis.call('GET', KEYS[3])} end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
return {1, ARGV[3]}`;

/**
 * KEYS: due, inflight, leases  ARGV: nowMs, leaseMs, max, tokenPrefix -> {id, token, id, token...}
 * First returns expired leases to `due` (their owner died), then claims up to `max` due ids.
 */
const CLAIM_LUA = `
local now = tonumber(ARGV[1])
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[2], id)
  redis.call('HDEL', KEYS[3], id)
  redis.call('ZADD', KEYS[1], now, id)
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for i, id in ipairs(ids) do
  local token = ARGV[4] .. ':' .. i
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), id)
  redis.call('HSET', KEYS[3], id, token)
  table.insert(out, id)
  table.insert(out, token)
end
return out`;

/** KEYS: inflight, leases  ARGV: id, token, leaseUntilMs -> 1 if still owned */
const EXTEND_LUA = `
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1`;

/**
 * Applies the outcome of one attempt, only if `token` still owns the lease.
 * KEYS: inflight, leases, msg, due, dlqIndex, dlqKey[, cbMsg]
 * ARGV: id, token, action(done|retry|dlq|release), msgJson, dueMs, dlqId, dlqJson, nowMs, cbId, cbJson
 * -> 0 stale lease, 1 applied, 2 message was cancelled meanwhile (nothing scheduled)
 */
const FINISH_LUA = `
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 0 then return 2 end
local action = ARGV[3]
if action == 'done' then
  redis.call('DEL', KEYS[3])
elseif action == 'retry' then
  redis.call('SET', KEYS[3], ARGV[4])
  redis.call('ZADD', KEYS[4], ARGV[5], ARGV[1])
elseif action == 'release' then
  redis.call('ZADD', KEYS[4], ARGV[8], ARGV[1])
elseif action == 'dlq' then
  redis.call('DEL', KEYS[3])
  redis.call('SET', KEYS[6], ARGV[7])
  redis.call('ZADD', KEYS[5], ARGV[8], ARGV[6])
end
if #KEYS >= 7 then
  redis.call('SET', KEYS[7], ARGV[10])
  redis.call('ZADD', KEYS[4], ARGV[8], ARGV[9])
end
return 1`;

/** KEYS: msg, due, inflight, leases  ARGV: id -> 1 cancelled, 0 unknown */
const CANCEL_LUA = `
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HDEL', KEYS[4], ARGV[1])
return 1`;

/**
 * Removes a DLQ entry and, for a re-drive, enqueues its replacement in the same step, so a
 * concurrent delete/retry of the same dlqId can win only once.
 * KEYS: dlqKey, dlqIndex[, newMsg, due]  ARGV: dlqId, newJson, dueMs, newId -> 1 | 0
 */
const DLQ_TAKE_LUA = `
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
if #KEYS >= 4 then
  redis.call('SET', KEYS[3], ARGV[2])
  redis.call('ZADD', KEYS[4], ARGV[3], ARGV[4])
end
return 1`;

// ---------------------------------------------------------------------------------------------
// Small pure helpers

class HttpError extends Error {
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

function randomId(prefix: string): string {
  return prefix + randomBytes(18).toString("base64url");
}

const DEDUP_WINDOW_MS = 10 * 60 * 1000;
const MAX_DELAY_MS = 86_400_000 * 7;
const MAX_BACKOFF_MS = 86_400_000;
const MAX_RETRIES = 100;
const MAX_IN_FLIGHT = 32;
const LEASE_GRACE_MS = 5_000;
const STOP_GRACE_MS = 500;
const MAX_STORED_RESPONSE_BYTES = 64 * 1024;

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

/**
 * Parses `10s`, `2m`, `1h`, `1d`, `500ms`, Go-style sequences such as `1h30m`, and bare numbers
 * (seconds). Returns milliseconds; throws HttpError(400) on anything else.
 */
export function parseDuration(raw: string, what: string): number {
  const s = raw.trim();
  if (/^\d+(\.\d+)?$/.test(s)) return Number(s) * 1000;
  const unitMs: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
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

// --- Upstash-Retry-Delay: a tiny arithmetic language, compiled once at publish time ----------

type Expr = (retried: number) => number;

const FUNCS: Record<string, { min: number; max: number; fn: (...a: number[]) => number }> = {
  pow: { min: 2, max: 2, fn: (a, b) => Math.pow(a ?? NaN, b ?? NaN) },
  sqrt: { min: 1, max: 1, fn: (a) => Math.sqrt(a ?? NaN) },
  abs: { min: 1, max: 1, fn: (a) => Math.abs(a ?? NaN) },
  exp: { min: 1, max: 1, fn: (a) => Math.exp(a ?? NaN) },
  floor: { min: 1, max: 1, fn: (a) => Math.floor(a ?? NaN) },
  ceil: { min: 1, max: 1, fn: (a) => Math.ceil(a ?? NaN) },
  round: { min: 1, max: 1, fn: (a) => Math.round(a ?? NaN) },
  min: { min: 1, max: 64, fn: (...a) => Math.min(...a) },
  max: { min: 1, max: 64, fn: (...a) => Math.max(...a) },
};

/**
 * Recursive-descent parser for `+ - * /`, unary minus, parentheses, numbers, the variable
 * `retried` and the functions above. Never uses eval; input length and nesting are bounded.
 */
export function compileRetryDelay(src: string): Expr {
  if (src.length > 500) throw new HttpError(400, "retry delay expression too long");
  const tokens = src.match(/\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[A-Za-z_]\w*|[-+*/(),]|\S)/g) ?? [];
  const toks = tokens.map((t) => t.trim());
  let i = 0;
  let depth = 0;
  const fail = (msg: string): never => {
    throw new HttpError(400, `invalid retry delay expression (${msg}): ${src}`);
  };
  const peek = (): string | undefined => toks[i];
  const expect = (t: string) => (toks[i] === t ? i++ : fail(`expected '${t}'`));

  const expr = (): Expr => {
    if (++depth > 50) fail("too deeply nested");
    let left = term();
    for (let op = peek(); op === "+" || op === "-"; op = peek()) {
      i++;
      const l = left;
      const r = term();
      left = op === "+" ? (x) => l(x) + r(x) : (x) => l(x) - r(x);
    }
    depth--;
    return left;
  };
  const term = (): Expr => {
    let left = unary();
    for (let op = peek(); op === "*" || op === "/"; op = peek()) {
      i++;
      const l = left;
      const r = unary();
      left = op === "*" ? (x) => l(x) * r(x) : (x) => l(x) / r(x);
    }
    return left;
  };
  const unary = (): Expr => {
    const t = peek();
    if (t === "-" || t === "+") {
      i++;
      if (++depth > 50) fail("too deeply nested");
      const inner = unary();
      depth--;
      return t === "-" ? (x) => -inner(x) : inner;
    }
    return primary();
  };
  const primary = (): Expr => {
    const t = peek();
    if (t === undefined) return fail("unexpected end");
    i++;
    if (/^\d/.test(t)) {
      const n = Number(t);
      return () => n;
    }
    if (t === "(") {
      const e = expr();
      expect(")");
      return e;
    }
    if (t === "retried") return (x) => x;
    const f = FUNCS[t];
    if (f) {
      expect("(");
      const args: Expr[] = [expr()];
      while (peek() === ",") {
        i++;
        args.push(expr());
      }
      expect(")");
      if (args.length < f.min || args.length > f.max) fail(`${t} takes ${f.min}..${f.max} arguments`);
      return (x) => f.fn(...args.map((a) => a(x)));
    }
    return fail(`unexpected '${t}'`);
  };

  const e = expr();
  if (i !== toks.length) fail(`unexpected '${toks[i]}'`);
  return e;
}

/** Default QStash backoff: min(1 day, e^(2.5·n)) seconds, n = failed attempts so far (≥ 1). */
function defaultBackoffMs(n: number): number {
  return Math.min(MAX_BACKOFF_MS, Math.exp(2.5 * n) * 1000);
}

/** Retry-After as seconds or an HTTP date, in ms (capped at 1 day); undefined when absent/bad. */
function parseRetryAfter(v: string | null, now: number): number | undefined {
  if (!v) return undefined;
  const t = v.trim();
  if (/^\d+(\.\d+)?$/.test(t)) return Math.min(MAX_BACKOFF_MS, Number(t) * 1000);
  const at = Date.parse(t);
  if (Number.isNaN(at)) return undefined;
  return Math.min(MAX_BACKOFF_MS, Math.max(0, at - now));
}

function headersToMulti(h: Iterable<[string, string]>): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [k, v] of h) {
    const name = canonicalHeader(k);
    (out[name] ??= []).push(v);
  }
  return out;
}

/** Go's http.CanonicalHeaderKey, which is how QStash reports header names. */
function canonicalHeader(k: string): string {
  return k
    .split("-")
    .map((p) => (p ? p[0]!.toUpperCase() + p.slice(1).toLowerCase() : p))
    .join("-");
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
function bodyFields(bytes: Uint8Array, name: string): Record<string, string> {
  if (bytes.length === 0) return {};
  try {
    return { [name]: strictUtf8.decode(bytes) };
  } catch {
    return { [`${name}Base64`]: Buffer.from(bytes).toString("base64") };
  }
}

function fromB64(b64: string): Uint8Array<ArrayBuffer> {
  return new Uint8Array(Buffer.from(b64, "base64"));
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

function parseCallback(h: HeaderGetter, which: "callback" | "failure-callback", defaultRetries: number): CallbackSpec | undefined {
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

// ---------------------------------------------------------------------------------------------

export async function startLocalQstash(opts: LocalQstashOptions): Promise<LocalQstashServer> {
  const prefix = opts.keyPrefix ?? "qstash:";
  const timeScale = opts.timeScale ?? 1;
  if (!(timeScale > 0) || !Number.isFinite(timeScale)) throw new Error("timeScale must be a positive number");
  const pollIntervalMs = Math.max(1, opts.pollIntervalMs ?? 100);
  const defaultRetries = opts.defaultRetries ?? 3;
  const deliveryTimeoutMs = opts.deliveryTimeoutMs ?? 30_000;
  const currentKey = new TextEncoder().encode(opts.currentSigningKey);

  const K = {
    msg: (id: string) => `${prefix}msg:${id}`,
    due: `${prefix}due`,
    inflight: `${prefix}inflight`,
    leases: `${prefix}leases`,
    dedup: (h: string) => `${prefix}dedup:${h}`,
    dlq: `${prefix}dlq`,
    dlqEntry: (id: string) => `${prefix}dlq:${id}`,
  };

  const redis = new RedisClient(`redis://${opts.redisHost}:${opts.redisPort}`);
  await redis.connect();
  const evalLua = (script: string, keys: string[], args: (string | number)[]): Promise<unknown> =>
    redis.send("EVAL", [script, String(keys.length), ...keys, ...args.map(String)]);

  const counters = { published: 0, delivered: 0, failedAttempts: 0, dlq: 0 };
  const instanceId = randomBytes(6).toString("hex");
  let leaseSeq = 0;
  let stopping = false;
  const stopCtl = new AbortController();
  const inFlight = new Set<Promise<void>>();

  // --- enqueue ---------------------------------------------------------------------------

  interface Draft {
    msg: StoredMessage;
    dedupKey?: string;
  }

  /** Validates one publish (from HTTP headers or a batch entry) into a message not yet stored. */
  function draftFromPublish(destRaw: string, h: HeaderGetter, body: Uint8Array, callerIp: string | undefined): Draft {
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
      if (ms > MAX_DELAY_MS) throw new HttpError(400, `Upstash-Delay too large: ${delayRaw}`);
      dueAt = now + ms * timeScale;
    }
    const retryDelay = h.get("upstash-retry-delay")?.trim() || undefined;
    if (retryDelay !== undefined) compileRetryDelay(retryDelay); // validate now, 400 on error
    const timeoutRaw = h.get("upstash-timeout");
    const timeoutMs = timeoutRaw && timeoutRaw.trim() ? parseDuration(timeoutRaw, "Upstash-Timeout") : undefined;
    if (timeoutMs !== undefined && timeoutMs <= 0) throw new HttpError(400, `invalid Upstash-Timeout: ${timeoutRaw}`);
    const headers = forwardedHeaders(h, "upstash-", true);
    const labelRaw = h.get("upstash-label");
    const labels = labelRaw ? labelRaw.split(",").map((s) => s.trim()).filter(Boolean) : undefined;
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
      maxRetries: parseRetries(h.get("upstash-retries"), defaultRetries),
      retried: 0,
      retryDelay,
      timeoutMs,
      callback: parseCallback(h, "callback", defaultRetries),
      failureCallback: parseCallback(h, "failure-callback", defaultRetries),
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
      for (const [k, v] of [...headers].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))) hash.update(`${k}:${v}\n`);
      hash.update(body);
      dedupKey = hash.digest("hex");
    }
    return { msg, dedupKey };
  }

  async function enqueue(d: Draft): Promise<{ messageId: string; deduplicated: boolean }> {
    const keys = [K.msg(d.msg.id), K.due];
    if (d.dedupKey) keys.push(K.dedup(d.dedupKey));
    const res = (await evalLua(ENQUEUE_LUA, keys, [JSON.stringify(d.msg), d.msg.notBefore, d.msg.id, DEDUP_WINDOW_MS])) as [
      number,
      string | null,
    ];
    if (res[0] === 1) {
      counters.published++;
      if (d.msg.notBefore <= Date.now() + pollIntervalMs) kick();
      return { messageId: d.msg.id, deduplicated: false };
    }
    return { messageId: res[1] ?? d.msg.id, deduplicated: true };
  }

  // --- delivery --------------------------------------------------------------------------

  async function sign(url: string, body: Uint8Array): Promise<string> {
    const now = Math.floor(Date.now() / 1000);
    // QStash's own tokens keep the '=' padding of the base64url body hash; the SDK ignores it.
    const bodyHash = `${createHash("sha256").update(body).digest("base64url")}=`;
    return await new SignJWT({ body: bodyHash })
      .setProtectedHeader({ alg: "HS256", typ: "JWT" })
      .setIssuer("Upstash")
      .setSubject(url)
      .setIssuedAt(now)
      .setNotBefore(now)
      .setExpirationTime(now + 300)
      .setJti(randomId("jwt_"))
      .sign(currentKey);
  }

  /** Builds the callback / failure-callback message (a normal message, so it survives restarts). */
  function callbackMessage(spec: CallbackSpec, src: StoredMessage, res: AttemptResponse, dlqId?: string): StoredMessage {
    const now = Date.now();
    const payload: Record<string, unknown> = {
      status: res.status ?? 0,
      header: res.headers ?? {},
      body: res.bodyB64 ?? "",
      retried: src.retried,
      maxRetries: src.maxRetries,
      sourceMessageId: src.id,
      url: src.url,
      method: src.method,
      sourceHeader: headersToMulti(src.headers),
      sourceBody: src.bodyB64,
      notBefore: String(src.notBefore),
      createdAt: String(src.createdAt),
      callerIP: src.callerIp ?? "",
      ...(res.error ? { error: res.error } : {}),
      ...(dlqId ? { dlqId } : {}),
    };
    const due = now + spec.delayMs * timeScale;
    return {
      id: randomId("msg_"),
      url: spec.url,
      method: spec.method,
      headers: [["content-type", "application/json"], ...spec.headers],
      bodyB64: Buffer.from(JSON.stringify(payload)).toString("base64"),
      createdAt: now,
      notBefore: Math.round(due),
      maxRetries: spec.retries,
      retried: 0,
      timeoutMs: spec.timeoutMs,
      isCallback: true,
    };
  }

  async function finish(
    id: string,
    token: string,
    action: "done" | "retry" | "dlq" | "release",
    extra: { msg?: StoredMessage; dueMs?: number; dlq?: DlqRecord; cb?: StoredMessage } = {},
  ): Promise<number> {
    const keys = [K.inflight, K.leases, K.msg(id), K.due, K.dlq, K.dlqEntry(extra.dlq?.dlqId ?? "none")];
    if (extra.cb) keys.push(K.msg(extra.cb.id));
    const r = await evalLua(FINISH_LUA, keys, [
      id,
      token,
      action,
      extra.msg ? JSON.stringify(extra.msg) : "",
      Math.round(extra.dueMs ?? Date.now()),
      extra.dlq?.dlqId ?? "",
      extra.dlq ? JSON.stringify(extra.dlq) : "",
      Date.now(),
      extra.cb?.id ?? "",
      extra.cb ? JSON.stringify(extra.cb) : "",
    ]);
    return Number(r);
  }

  async function readResponse(res: Response): Promise<AttemptResponse> {
    let bytes = new Uint8Array(0);
    try {
      bytes = new Uint8Array(await res.arrayBuffer());
    } catch {
      /* body aborted: keep the status */
    }
    if (bytes.length > MAX_STORED_RESPONSE_BYTES) bytes = bytes.slice(0, MAX_STORED_RESPONSE_BYTES);
    return {
      status: res.status,
      headers: headersToMulti(res.headers.entries()),
      bodyB64: Buffer.from(bytes).toString("base64"),
    };
  }

  /** One delivery attempt of a claimed message; never throws. */
  async function attempt(id: string, token: string): Promise<void> {
    try {
      const raw = await redis.get(K.msg(id));
      if (raw === null) {
        await finish(id, token, "done"); // cancelled between claim and read
        return;
      }
      const msg = JSON.parse(raw) as StoredMessage;
      const timeoutMs = msg.timeoutMs ?? deliveryTimeoutMs;
      if (timeoutMs > deliveryTimeoutMs) {
        // The claim lease covers the default timeout only; a longer Upstash-Timeout needs more.
        const ok = await evalLua(EXTEND_LUA, [K.inflight, K.leases], [id, token, Date.now() + timeoutMs + LEASE_GRACE_MS]);
        if (Number(ok) !== 1) return; // lease lost; the new owner delivers
      }

      // fetch() refuses a body on GET/HEAD; the signature then covers the empty body delivered.
      const body = msg.method === "GET" || msg.method === "HEAD" ? new Uint8Array(0) : fromB64(msg.bodyB64);
      const headers = new Headers();
      for (const [k, v] of msg.headers) headers.append(k, v);
      headers.set("Upstash-Signature", await sign(msg.url, body));
      headers.set("Upstash-Message-Id", msg.id);
      headers.set("Upstash-Retried", String(msg.retried));
      headers.set("User-Agent", "Upstash-QStash");
      if (msg.callerIp) headers.set("Upstash-Caller-Ip", msg.callerIp);

      let result: AttemptResponse;
      let retryAfterMs: number | undefined;
      const signal = AbortSignal.any([stopCtl.signal, AbortSignal.timeout(timeoutMs)]);
      try {
        const res = await fetch(msg.url, {
          method: msg.method,
          headers,
          body: body.length > 0 ? body : undefined,
          signal,
        });
        result = await readResponse(res);
        retryAfterMs = parseRetryAfter(res.headers.get("retry-after"), Date.now());
      } catch (e) {
        if (stopCtl.signal.aborted) {
          // Clean shutdown: hand the message straight back instead of waiting for the lease.
          await finish(id, token, "release");
          return;
        }
        result = { error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) };
      }

      const ok = result.status !== undefined && result.status >= 200 && result.status < 300;
      if (ok) {
        const cb = msg.callback && !msg.isCallback ? callbackMessage(msg.callback, msg, result) : undefined;
        if ((await finish(id, token, "done", { cb })) === 1) counters.delivered++;
        if (cb) kick();
        return;
      }

      counters.failedAttempts++;
      if (msg.retried < msg.maxRetries) {
        const n = msg.retried + 1;
        let delayMs = defaultBackoffMs(n);
        if (msg.retryDelay) {
          try {
            const v = compileRetryDelay(msg.retryDelay)(msg.retried);
            if (Number.isFinite(v)) delayMs = Math.min(MAX_BACKOFF_MS, Math.max(0, v));
          } catch {
            /* validated at publish; keep the default backoff if it somehow fails now */
          }
        }
        if (retryAfterMs !== undefined) delayMs = retryAfterMs;
        const next: StoredMessage = { ...msg, retried: n };
        await finish(id, token, "retry", { msg: next, dueMs: Date.now() + delayMs * timeScale });
        return;
      }

      const dlq: DlqRecord = { dlqId: `${Date.now()}-${randomBytes(6).toString("hex")}`, addedAt: Date.now(), message: msg, response: result };
      const cb = msg.failureCallback && !msg.isCallback ? callbackMessage(msg.failureCallback, msg, result, dlq.dlqId) : undefined;
      if ((await finish(id, token, "dlq", { dlq, cb })) === 1) counters.dlq++;
      if (cb) kick();
    } catch (e) {
      // Redis trouble or a corrupt record: leave the lease to expire so the message is retried.
      console.error(`[local-qstash] delivery of ${id} failed internally: ${(e as Error).message}`);
    }
  }

  // --- poller ----------------------------------------------------------------------------

  let wake: (() => void) | null = null;
  function kick(): void {
    wake?.();
  }
  function nap(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        wake = null;
        resolve();
      };
      const t = setTimeout(done, ms);
      wake = done;
    });
  }

  let lastPollError = "";
  async function pollLoop(): Promise<void> {
    while (!stopping) {
      let claimedFull = false;
      try {
        const room = MAX_IN_FLIGHT - inFlight.size;
        if (room > 0) {
          const out = (await evalLua(CLAIM_LUA, [K.due, K.inflight, K.leases], [
            Date.now(),
            deliveryTimeoutMs + LEASE_GRACE_MS,
            room,
            `${instanceId}:${++leaseSeq}`,
          ])) as string[];
          for (let i = 0; i + 1 < out.length; i += 2) {
            const p = attempt(out[i]!, out[i + 1]!);
            inFlight.add(p);
            void p.finally(() => {
              inFlight.delete(p);
              kick(); // capacity freed
            });
          }
          claimedFull = out.length / 2 >= room;
        }
        lastPollError = "";
      } catch (e) {
        // Redis unreachable: report each distinct error once and slow down instead of spinning.
        const msg = (e as Error).message;
        if (!stopping && msg !== lastPollError) console.error(`[local-qstash] poll failed: ${msg}`);
        lastPollError = msg;
      }
      if (stopping) break;
      if (lastPollError) await nap(Math.max(pollIntervalMs, 1000));
      else if (!claimedFull || inFlight.size >= MAX_IN_FLIGHT) await nap(pollIntervalMs);
    }
  }

  // --- HTTP API --------------------------------------------------------------------------

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

  /** SDK filters arrive as repeated query params; a record matches if every given field matches. */
  function matchesFilter(q: URLSearchParams, r: { message: StoredMessage; status?: number; at: number }): boolean {
    const any = (name: string, value: string | undefined) => {
      const want = q.getAll(name);
      return want.length === 0 || (value !== undefined && want.includes(value));
    };
    const m = r.message;
    if (!any("url", m.url) || !any("messageId", m.id) || !any("callerIp", m.callerIp)) return false;
    if (!any("responseStatus", r.status === undefined ? undefined : String(r.status))) return false;
    for (const unsupported of ["topicName", "scheduleId", "queueName", "flowControlKey"]) if (!any(unsupported, undefined)) return false;
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

  async function loadDlq(): Promise<DlqRecord[]> {
    const ids = (await redis.send("ZRANGE", [K.dlq, "0", "-1", "REV"])) as string[];
    if (ids.length === 0) return [];
    const raws = (await redis.send("MGET", ids.map(K.dlqEntry))) as (string | null)[];
    const out: DlqRecord[] = [];
    for (const raw of raws) {
      if (raw === null) continue;
      try {
        out.push(JSON.parse(raw) as DlqRecord);
      } catch {
        /* skip a corrupt entry rather than failing the whole listing */
      }
    }
    return out;
  }

  async function selectDlq(q: URLSearchParams): Promise<DlqRecord[]> {
    const all = await loadDlq();
    const ids = q.getAll("dlqIds");
    if (ids.length > 0) return all.filter((r) => ids.includes(r.dlqId));
    return all.filter((r) => matchesFilter(q, { message: r.message, status: r.response.status, at: r.addedAt }));
  }

  function countParam(q: URLSearchParams, def: number): number {
    const n = Number(q.get("count") ?? def);
    return Number.isInteger(n) && n > 0 ? Math.min(n, 1000) : def;
  }

  async function dlqTake(r: DlqRecord, redrive: boolean): Promise<string | undefined> {
    if (!redrive) {
      const ok = await evalLua(DLQ_TAKE_LUA, [K.dlqEntry(r.dlqId), K.dlq], [r.dlqId]);
      return Number(ok) === 1 ? r.dlqId : undefined;
    }
    // A re-drive is a fresh message (new id, retry counter reset) with the same content.
    const now = Date.now();
    const msg: StoredMessage = { ...r.message, id: randomId("msg_"), createdAt: now, notBefore: now, retried: 0 };
    const ok = await evalLua(DLQ_TAKE_LUA, [K.dlqEntry(r.dlqId), K.dlq, K.msg(msg.id), K.due], [r.dlqId, JSON.stringify(msg), now, msg.id]);
    if (Number(ok) !== 1) return undefined;
    kick();
    return msg.id;
  }

  /** Bulk DLQ delete/retry: dlqIds, or filters (no filter = all), at most `count` per call. */
  async function dlqBulk(q: URLSearchParams, redrive: boolean): Promise<Response> {
    const explicit = q.getAll("dlqIds").length > 0;
    const matched = await selectDlq(q);
    const limit = explicit ? matched.length : countParam(q, 100);
    const batch = matched.slice(0, limit);
    const done: string[] = [];
    for (const r of batch) {
      const id = await dlqTake(r, redrive);
      if (id) done.push(id);
    }
    // Processed entries leave the DLQ, so "next page" is simply "call again"; any cursor works.
    const cursor = matched.length > limit ? String(limit) : undefined;
    if (redrive) return json(200, { responses: done.map((messageId) => ({ messageId })), ...(cursor ? { cursor } : {}) });
    return json(200, { deleted: done.length, ...(cursor ? { cursor } : {}) });
  }

  async function cancelOne(id: string): Promise<boolean> {
    const r = await evalLua(CANCEL_LUA, [K.msg(id), K.due, K.inflight, K.leases], [id]);
    return Number(r) === 1;
  }

  async function pendingMessages(): Promise<StoredMessage[]> {
    const due = (await redis.send("ZRANGE", [K.due, "0", "-1"])) as string[];
    const inflight = (await redis.send("ZRANGE", [K.inflight, "0", "-1"])) as string[];
    const ids = [...new Set([...due, ...inflight])];
    if (ids.length === 0) return [];
    const raws = (await redis.send("MGET", ids.map(K.msg))) as (string | null)[];
    const out: StoredMessage[] = [];
    for (const raw of raws) {
      if (raw === null) continue;
      try {
        out.push(JSON.parse(raw) as StoredMessage);
      } catch {
        /* skip corrupt */
      }
    }
    return out;
  }

  async function readJsonBody(req: Request): Promise<unknown> {
    const text = await req.text();
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new HttpError(400, "malformed JSON body");
    }
  }

  async function handleBatch(req: Request, callerIp: string | undefined): Promise<Response> {
    const parsed = await readJsonBody(req);
    if (!Array.isArray(parsed)) throw new HttpError(400, "batch body must be a JSON array");
    // Validate every entry before storing any, so a bad entry does not half-publish the batch.
    const drafts: Draft[] = parsed.map((entry: unknown, i) => {
      if (typeof entry !== "object" || entry === null) throw new HttpError(400, `batch entry ${i} is not an object`);
      const e = entry as Record<string, unknown>;
      if (typeof e.destination !== "string" || e.destination === "") throw new HttpError(400, `batch entry ${i}: destination is required`);
      if (e.queue !== undefined) throw new HttpError(501, "queues are not supported by local QStash");
      const hdrs: Record<string, string> = {};
      if (e.headers !== undefined && e.headers !== null) {
        if (typeof e.headers !== "object" || Array.isArray(e.headers)) throw new HttpError(400, `batch entry ${i}: headers must be an object`);
        for (const [k, v] of Object.entries(e.headers as Record<string, unknown>)) {
          if (typeof v !== "string") throw new HttpError(400, `batch entry ${i}: header ${k} must be a string`);
          hdrs[k] = v;
        }
      }
      if (e.body !== undefined && e.body !== null && typeof e.body !== "string") throw new HttpError(400, `batch entry ${i}: body must be a string`);
      const body = new TextEncoder().encode(typeof e.body === "string" ? e.body : "");
      return draftFromPublish(e.destination, headerGetterFromRecord(hdrs), body, callerIp);
    });
    const out = [];
    for (const d of drafts) {
      const r = await enqueue(d);
      out.push({ messageId: r.messageId, url: d.msg.url, ...(r.deduplicated ? { deduplicated: true } : {}) });
    }
    return json(200, out);
  }

  async function route(req: Request, callerIp: string | undefined): Promise<Response> {
    // Route on the raw URL: the destination sits unencoded in the path and must keep its `//`.
    const raw = req.url;
    const schemeEnd = raw.indexOf("//");
    const pathStart = raw.indexOf("/", schemeEnd >= 0 ? schemeEnd + 2 : 0);
    const pathAndQuery = pathStart >= 0 ? raw.slice(pathStart) : "/";
    const qIdx = pathAndQuery.indexOf("?");
    const path = qIdx >= 0 ? pathAndQuery.slice(0, qIdx) : pathAndQuery;
    const query = new URLSearchParams(qIdx >= 0 ? pathAndQuery.slice(qIdx + 1) : "");
    const method = req.method.toUpperCase();

    if (!path.startsWith("/v2/")) throw new HttpError(404, `not found: ${method} ${path}`);
    if (req.headers.get("authorization") !== `Bearer ${opts.token}`) throw new HttpError(401, "Unauthorized");

    if (path.startsWith("/v2/publish/") && method === "POST") {
      // destination = raw path after /v2/publish/ + raw query string (it belongs to the destination).
      const dest = pathAndQuery.slice("/v2/publish/".length);
      const body = new Uint8Array(await req.arrayBuffer());
      const d = draftFromPublish(dest, headerGetterFromHeaders(req.headers), body, callerIp);
      const r = await enqueue(d);
      return r.deduplicated
        ? json(202, { messageId: r.messageId, url: d.msg.url, deduplicated: true })
        : json(200, { messageId: r.messageId, url: d.msg.url });
    }
    if (path === "/v2/batch" && method === "POST") return await handleBatch(req, callerIp);
    if (path === "/v2/keys" && method === "GET") return json(200, { current: opts.currentSigningKey, next: opts.nextSigningKey });

    const seg = path.split("/").slice(2).map((s) => {
      try {
        return decodeURIComponent(s);
      } catch {
        return s;
      }
    });

    if (seg[0] === "messages") {
      if (seg.length === 2 && seg[1]) {
        if (method === "GET") {
          const rawMsg = await redis.get(K.msg(seg[1]));
          if (rawMsg === null) throw new HttpError(404, `message ${seg[1]} not found`);
          return json(200, publicMessage(JSON.parse(rawMsg) as StoredMessage));
        }
        if (method === "DELETE") {
          if (!(await cancelOne(seg[1]))) throw new HttpError(404, `message ${seg[1]} not found`);
          return json(200, { cancelled: 1 });
        }
      }
      if (seg.length === 1 && method === "DELETE") {
        const ids = query.getAll("messageIds");
        const targets = ids.length > 0 ? ids : (await pendingMessages()).filter((m) => matchesFilter(query, { message: m, at: m.createdAt })).map((m) => m.id);
        let cancelled = 0;
        for (const id of targets) if (await cancelOne(id)) cancelled++;
        return json(200, { cancelled });
      }
    }

    if (seg[0] === "dlq") {
      if (seg.length === 1 && method === "GET") {
        const all = await selectDlq(query);
        const start = Math.max(0, Number.parseInt(query.get("cursor") ?? "0", 10) || 0);
        const count = countParam(query, 100);
        const page = all.slice(start, start + count);
        const next = start + count < all.length ? String(start + count) : undefined;
        return json(200, { messages: page.map(publicDlq), ...(next ? { cursor: next } : {}) });
      }
      if (seg.length === 1 && method === "DELETE") return await dlqBulk(query, false);
      if (seg.length === 2 && seg[1] === "retry" && method === "POST") return await dlqBulk(query, true);
      if (seg.length === 2 && seg[1] && method === "GET") {
        const rawEntry = await redis.get(K.dlqEntry(seg[1]));
        if (rawEntry === null) throw new HttpError(404, `dlq message ${seg[1]} not found`);
        return json(200, publicDlq(JSON.parse(rawEntry) as DlqRecord));
      }
      if (seg.length === 2 && seg[1] && method === "DELETE") {
        const rawEntry = await redis.get(K.dlqEntry(seg[1]));
        if (rawEntry === null || !(await dlqTake(JSON.parse(rawEntry) as DlqRecord, false))) throw new HttpError(404, `dlq message ${seg[1]} not found`);
        return new Response(null, { status: 200 });
      }
      if (seg.length === 3 && seg[1] && seg[2] === "retry" && method === "POST") {
        const rawEntry = await redis.get(K.dlqEntry(seg[1]));
        const id = rawEntry === null ? undefined : await dlqTake(JSON.parse(rawEntry) as DlqRecord, true);
        if (!id) throw new HttpError(404, `dlq message ${seg[1]} not found`);
        return json(200, { responses: [{ messageId: id }] });
      }
    }

    const known = ["schedules", "queues", "enqueue", "topics", "events", "flowControl", "globalParallelism", "workflows"];
    if (seg[0] !== undefined && known.includes(seg[0])) throw new HttpError(501, `/v2/${seg[0]} is not implemented by local QStash`);
    throw new HttpError(404, `not found: ${method} ${path}`);
  }

  const server = Bun.serve({
    port: opts.port ?? 0,
    hostname: opts.hostname ?? "127.0.0.1",
    async fetch(req, srv) {
      if (stopping) return json(503, { error: "local QStash is stopping" });
      try {
        return await route(req, srv.requestIP(req)?.address);
      } catch (e) {
        if (e instanceof HttpError) return json(e.status, { error: e.message });
        console.error(`[local-qstash] ${req.method} ${req.url}: ${(e as Error).stack ?? String(e)}`);
        return json(500, { error: "internal error" });
      }
    },
  });
  const port = server.port ?? 0;
  const host = opts.hostname && opts.hostname !== "0.0.0.0" ? opts.hostname : "127.0.0.1";
  const loop = pollLoop();

  return {
    url: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
    port,
    stats: () => ({ ...counters }),
    async stop() {
      if (stopping) return;
      stopping = true;
      kick();
      await server.stop(true);
      // Bounded: with Redis already gone a pending EVAL could wait for reconnects for a long time.
      await Promise.race([loop, Bun.sleep(2_000)]);
      // Let attempts that are nearly done finish, then abort the rest; aborted attempts release
      // their lease so another instance re-delivers at once (at-least-once, never lost).
      const settle = (ms: number) => Promise.race([Promise.allSettled([...inFlight]), Bun.sleep(ms)]);
      await settle(STOP_GRACE_MS);
      stopCtl.abort();
      await settle(2_000);
      redis.close();
    },
  };
}

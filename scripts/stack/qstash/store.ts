/**
 * The QStash stand-in's state, all of it in Redis under one key prefix (default "qstash:"), so a
 * new instance started on the same Redis continues where a stopped (or crashed) one left off:
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
 * The stand-in has no schedules, queues or URL groups (their routes answer 501), so messages and
 * the DLQ are all the state there is.
 */
import { randomBytes } from "node:crypto";
import { RedisClient } from "bun";

// ---------------------------------------------------------------------------------------------
// Stored shapes

/** Options of a callback / failure callback, taken from Upstash-(Failure-)Callback-* headers. */
export interface CallbackSpec {
  url: string;
  method: string;
  retries: number;
  delayMs: number;
  timeoutMs?: number;
  headers: [string, string][];
}

export interface StoredMessage {
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

/** What the destination answered to one attempt (or why there was no answer). */
export interface AttemptResponse {
  status?: number;
  headers?: Record<string, string[]>;
  bodyB64?: string;
  error?: string;
}

export interface DlqRecord {
  dlqId: string;
  addedAt: number;
  message: StoredMessage;
  response: AttemptResponse;
}

/** A validated publish not yet stored; `dedupKey` is set when the publish asked for dedup. */
export interface Draft {
  msg: StoredMessage;
  dedupKey?: string;
}

export type FinishAction = "done" | "retry" | "dlq" | "release";

/** Dedup ids and content hashes are remembered this long (the hosted window). */
const DEDUP_WINDOW_MS = 10 * 60 * 1000;

// ---------------------------------------------------------------------------------------------
// Small shape helpers shared by delivery and the HTTP API

export function randomId(prefix: string): string {
  return prefix + randomBytes(18).toString("base64url");
}

export function fromB64(b64: string): Uint8Array<ArrayBuffer> {
  return new Uint8Array(Buffer.from(b64, "base64"));
}

/** Go's http.CanonicalHeaderKey, which is how QStash reports header names. */
export function canonicalHeader(k: string): string {
  return k
    .split("-")
    .map((p) => (p ? p[0]!.toUpperCase() + p.slice(1).toLowerCase() : p))
    .join("-");
}

/** Header pairs as QStash reports them: canonical names, each with its list of values. */
export function headersToMulti(h: Iterable<[string, string]>): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [k, v] of h) {
    const name = canonicalHeader(k);
    (out[name] ??= []).push(v);
  }
  return out;
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

function keysFor(prefix: string) {
  return {
    msg: (id: string) => `${prefix}msg:${id}`,
    due: `${prefix}due`,
    inflight: `${prefix}inflight`,
    leases: `${prefix}leases`,
    dedup: (h: string) => `${prefix}dedup:${h}`,
    dlq: `${prefix}dlq`,
    dlqEntry: (id: string) => `${prefix}dlq:${id}`,
  };
}

/** The values of an MGET that exist and parse as JSON; a corrupt entry is skipped, not fatal. */
function parseAll<T>(raws: (string | null)[]): T[] {
  const out: T[] = [];
  for (const raw of raws) {
    if (raw === null) continue;
    try {
      out.push(JSON.parse(raw) as T);
    } catch {
      /* skip a corrupt entry rather than failing the whole listing */
    }
  }
  return out;
}

/** Every state transition of messages and DLQ entries; the only code that talks to Redis. */
export class QstashStore {
  private readonly K: ReturnType<typeof keysFor>;

  private constructor(
    private readonly redis: RedisClient,
    prefix: string,
  ) {
    this.K = keysFor(prefix);
  }

  static async connect(host: string, port: number, prefix: string): Promise<QstashStore> {
    const redis = new RedisClient(`redis://${host}:${port}`);
    await redis.connect();
    return new QstashStore(redis, prefix);
  }

  close(): void {
    this.redis.close();
  }

  private evalLua(script: string, keys: string[], args: (string | number)[]): Promise<unknown> {
    return this.redis.send("EVAL", [script, String(keys.length), ...keys, ...args.map(String)]);
  }

  // --- messages --------------------------------------------------------------------------

  /** Stores a draft unless its dedup key was seen within the window (then: the first id). */
  async enqueue(d: Draft): Promise<{ messageId: string; deduplicated: boolean }> {
    const K = this.K;
    const keys = [K.msg(d.msg.id), K.due];
    if (d.dedupKey) keys.push(K.dedup(d.dedupKey));
    const res = (await this.evalLua(ENQUEUE_LUA, keys, [
      JSON.stringify(d.msg),
      d.msg.notBefore,
      d.msg.id,
      DEDUP_WINDOW_MS,
    ])) as [number, string | null];
    if (res[0] === 1) return { messageId: d.msg.id, deduplicated: false };
    return { messageId: res[1] ?? d.msg.id, deduplicated: true };
  }

  /** A pending or in-flight message; null once delivered, dead-lettered or cancelled. */
  async getMessage(id: string): Promise<StoredMessage | null> {
    const raw = await this.redis.get(this.K.msg(id));
    return raw === null ? null : (JSON.parse(raw) as StoredMessage);
  }

  async cancel(id: string): Promise<boolean> {
    const K = this.K;
    const r = await this.evalLua(CANCEL_LUA, [K.msg(id), K.due, K.inflight, K.leases], [id]);
    return Number(r) === 1;
  }

  /** Every message still waiting for (or in the middle of) an attempt. */
  async pendingMessages(): Promise<StoredMessage[]> {
    const K = this.K;
    const due = (await this.redis.send("ZRANGE", [K.due, "0", "-1"])) as string[];
    const inflight = (await this.redis.send("ZRANGE", [K.inflight, "0", "-1"])) as string[];
    const ids = [...new Set([...due, ...inflight])];
    if (ids.length === 0) return [];
    return parseAll<StoredMessage>((await this.redis.send("MGET", ids.map(K.msg))) as (string | null)[]);
  }

  // --- DLQ -------------------------------------------------------------------------------

  /** The whole DLQ, newest first (by the time an entry was added, then by dlqId). */
  async loadDlq(): Promise<DlqRecord[]> {
    const K = this.K;
    const ids = (await this.redis.send("ZRANGE", [K.dlq, "0", "-1", "REV"])) as string[];
    if (ids.length === 0) return [];
    const out = parseAll<DlqRecord>((await this.redis.send("MGET", ids.map(K.dlqEntry))) as (string | null)[]);
    // A total order that a record carries itself, so a list cursor can name a position even
    // after the entry it points at has been deleted or re-driven.
    return out.sort((a, b) => b.addedAt - a.addedAt || (a.dlqId < b.dlqId ? 1 : a.dlqId > b.dlqId ? -1 : 0));
  }

  async getDlq(dlqId: string): Promise<DlqRecord | null> {
    const raw = await this.redis.get(this.K.dlqEntry(dlqId));
    return raw === null ? null : (JSON.parse(raw) as DlqRecord);
  }

  /**
   * Removes a DLQ entry; with `redrive` it is replaced by a fresh message (new id, retry
   * counter reset, same content) due now. Returns the dlqId (delete) or the new message id
   * (re-drive), or undefined when another request took the entry first.
   */
  async dlqTake(r: DlqRecord, redrive: boolean): Promise<string | undefined> {
    const K = this.K;
    if (!redrive) {
      const ok = await this.evalLua(DLQ_TAKE_LUA, [K.dlqEntry(r.dlqId), K.dlq], [r.dlqId]);
      return Number(ok) === 1 ? r.dlqId : undefined;
    }
    const now = Date.now();
    const msg: StoredMessage = { ...r.message, id: randomId("msg_"), createdAt: now, notBefore: now, retried: 0 };
    const ok = await this.evalLua(
      DLQ_TAKE_LUA,
      [K.dlqEntry(r.dlqId), K.dlq, K.msg(msg.id), K.due],
      [r.dlqId, JSON.stringify(msg), now, msg.id],
    );
    return Number(ok) === 1 ? msg.id : undefined;
  }

  // --- leases (delivery) -----------------------------------------------------------------

  /** Re-queues expired leases, then claims up to `max` due messages as [id, leaseToken] pairs. */
  async claim(nowMs: number, leaseMs: number, max: number, tokenPrefix: string): Promise<[string, string][]> {
    const K = this.K;
    const out = (await this.evalLua(
      CLAIM_LUA,
      [K.due, K.inflight, K.leases],
      [nowMs, leaseMs, max, tokenPrefix],
    )) as string[];
    const pairs: [string, string][] = [];
    for (let i = 0; i + 1 < out.length; i += 2) pairs.push([out[i]!, out[i + 1]!]);
    return pairs;
  }

  /** Moves a lease's expiry to `untilMs`; false when `token` no longer owns the message. */
  async extendLease(id: string, token: string, untilMs: number): Promise<boolean> {
    const K = this.K;
    return Number(await this.evalLua(EXTEND_LUA, [K.inflight, K.leases], [id, token, untilMs])) === 1;
  }

  /**
   * Applies an attempt's outcome under its lease (see FINISH_LUA), storing `cb` (a callback
   * message, due now) in the same step. -> 0 stale lease, 1 applied, 2 cancelled meanwhile.
   */
  async finish(
    id: string,
    token: string,
    action: FinishAction,
    extra: { msg?: StoredMessage; dueMs?: number; dlq?: DlqRecord; cb?: StoredMessage } = {},
  ): Promise<number> {
    const K = this.K;
    const keys = [K.inflight, K.leases, K.msg(id), K.due, K.dlq, K.dlqEntry(extra.dlq?.dlqId ?? "none")];
    if (extra.cb) keys.push(K.msg(extra.cb.id));
    const r = await this.evalLua(FINISH_LUA, keys, [
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
}

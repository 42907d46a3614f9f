/**
 * The delivery loop: claims due messages from the store, delivers each as a signed HTTP request,
 * and applies the outcome (done, retry with backoff, or DLQ plus failure callback) under the
 * attempt's lease. Several instances may run on one Redis; the store's leases keep every attempt
 * to one owner.
 *
 * Times: `timeScale` multiplies every relative delay here (default backoff, the retry-delay
 * expression, Retry-After, callback delays). Delivery timeouts are real time.
 */
import { createHash, randomBytes } from "node:crypto";
import { SignJWT } from "jose";
import { compileRetryDelay } from "./retry-expr.ts";
import {
  type AttemptResponse,
  type CallbackSpec,
  type DlqRecord,
  fromB64,
  headersToMulti,
  type QstashStore,
  randomId,
  type StoredMessage,
} from "./store.ts";

/** Counters of one instance (not of other instances sharing the Redis). */
export interface QstashStats {
  published: number;
  delivered: number;
  failedAttempts: number;
  dlq: number;
}

export interface DeliveryOptions {
  /** Signs every delivery (the receiver's "current" key). */
  currentSigningKey: string;
  timeScale: number;
  /** How often the poller looks for due messages when idle, ms. */
  pollIntervalMs: number;
  /** HTTP timeout of one attempt without Upstash-Timeout, ms; also the base claim lease. */
  deliveryTimeoutMs: number;
}

/** Hosted QStash caps each backoff (and Retry-After) at one day. */
const MAX_BACKOFF_MS = 86_400_000;
const MAX_IN_FLIGHT = 32;
const LEASE_GRACE_MS = 5_000;
const STOP_GRACE_MS = 500;
const MAX_STORED_RESPONSE_BYTES = 64 * 1024;

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

/** Unscaled delay before retry number `msg.retried + 1`: Retry-After, else the expression, else the default. */
function retryDelayMs(msg: StoredMessage, retryAfterMs: number | undefined): number {
  if (retryAfterMs !== undefined) return retryAfterMs;
  let delayMs = defaultBackoffMs(msg.retried + 1);
  if (msg.retryDelay) {
    try {
      const v = compileRetryDelay(msg.retryDelay)(msg.retried);
      if (Number.isFinite(v)) delayMs = Math.min(MAX_BACKOFF_MS, Math.max(0, v));
    } catch {
      /* validated at publish; keep the default backoff if it somehow fails now */
    }
  }
  return delayMs;
}

/** The Upstash-Signature JWT for delivering `body` to `url`, valid from now for 5 minutes. */
async function sign(key: Uint8Array, url: string, body: Uint8Array): Promise<string> {
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
    .sign(key);
}

/** Builds the callback / failure-callback message (a normal message, so it survives restarts). */
function callbackMessage(
  spec: CallbackSpec,
  src: StoredMessage,
  res: AttemptResponse,
  timeScale: number,
  dlqId?: string,
): StoredMessage {
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

/**
 * One instance's poller and its attempts in flight. `start()` once; `kick()` whenever a message
 * may have become due sooner than the next poll; `requestStop()` then `drain()` to stop.
 */
export class DeliveryLoop {
  private readonly signingKey: Uint8Array;
  private readonly instanceId = randomBytes(6).toString("hex");
  private readonly inFlight = new Set<Promise<void>>();
  /** Aborts attempts still running when a stop's grace period is over. */
  private readonly stopCtl = new AbortController();
  private leaseSeq = 0;
  private stopping = false;
  private wake: (() => void) | null = null;
  private lastPollError = "";
  private loop: Promise<void> = Promise.resolve();

  constructor(
    private readonly store: QstashStore,
    private readonly opts: DeliveryOptions,
    private readonly stats: QstashStats,
  ) {
    this.signingKey = new TextEncoder().encode(opts.currentSigningKey);
  }

  start(): void {
    this.loop = this.pollLoop();
  }

  /** Ends a nap early, so a message that just became due is claimed now. */
  kick(): void {
    this.wake?.();
  }

  /** Stops claiming; attempts in flight go on until `drain()`. */
  requestStop(): void {
    this.stopping = true;
    this.kick();
  }

  /**
   * Waits for the poller, lets attempts that are nearly done finish, then aborts the rest;
   * aborted attempts release their lease so another instance re-delivers at once
   * (at-least-once, never lost).
   */
  async drain(): Promise<void> {
    // Bounded: with Redis already gone a pending EVAL could wait for reconnects for a long time.
    await Promise.race([this.loop, Bun.sleep(2_000)]);
    const settle = (ms: number) => Promise.race([Promise.allSettled([...this.inFlight]), Bun.sleep(ms)]);
    await settle(STOP_GRACE_MS);
    this.stopCtl.abort();
    await settle(2_000);
  }

  private nap(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.wake = null;
        resolve();
      };
      const t = setTimeout(done, ms);
      this.wake = done;
    });
  }

  private async pollLoop(): Promise<void> {
    const { pollIntervalMs, deliveryTimeoutMs } = this.opts;
    while (!this.stopping) {
      let claimedFull = false;
      try {
        const room = MAX_IN_FLIGHT - this.inFlight.size;
        if (room > 0) {
          const claimed = await this.store.claim(
            Date.now(),
            deliveryTimeoutMs + LEASE_GRACE_MS,
            room,
            `${this.instanceId}:${++this.leaseSeq}`,
          );
          for (const [id, token] of claimed) {
            const p = this.attempt(id, token);
            this.inFlight.add(p);
            void p.finally(() => {
              this.inFlight.delete(p);
              this.kick(); // capacity freed
            });
          }
          claimedFull = claimed.length >= room;
        }
        this.lastPollError = "";
      } catch (e) {
        // Redis unreachable: report each distinct error once and slow down instead of spinning.
        const msg = (e as Error).message;
        if (!this.stopping && msg !== this.lastPollError) console.error(`[local-qstash] poll failed: ${msg}`);
        this.lastPollError = msg;
      }
      if (this.stopping) break;
      if (this.lastPollError) await this.nap(Math.max(pollIntervalMs, 1000));
      else if (!claimedFull || this.inFlight.size >= MAX_IN_FLIGHT) await this.nap(pollIntervalMs);
    }
  }

  /** One delivery attempt of a claimed message; never throws. */
  private async attempt(id: string, token: string): Promise<void> {
    const { store, stats } = this;
    const { deliveryTimeoutMs, timeScale } = this.opts;
    try {
      const msg = await store.getMessage(id);
      if (msg === null) {
        await store.finish(id, token, "done"); // cancelled between claim and read
        return;
      }
      const timeoutMs = msg.timeoutMs ?? deliveryTimeoutMs;
      if (timeoutMs > deliveryTimeoutMs) {
        // The claim lease covers the default timeout only; a longer Upstash-Timeout needs more.
        if (!(await store.extendLease(id, token, Date.now() + timeoutMs + LEASE_GRACE_MS))) return; // lease lost; the new owner delivers
      }

      // fetch() refuses a body on GET/HEAD; the signature then covers the empty body delivered.
      const body = msg.method === "GET" || msg.method === "HEAD" ? new Uint8Array(0) : fromB64(msg.bodyB64);
      const headers = new Headers();
      for (const [k, v] of msg.headers) headers.append(k, v);
      headers.set("Upstash-Signature", await sign(this.signingKey, msg.url, body));
      headers.set("Upstash-Message-Id", msg.id);
      headers.set("Upstash-Retried", String(msg.retried));
      headers.set("User-Agent", "Upstash-QStash");
      if (msg.callerIp) headers.set("Upstash-Caller-Ip", msg.callerIp);

      let result: AttemptResponse;
      let retryAfterMs: number | undefined;
      const signal = AbortSignal.any([this.stopCtl.signal, AbortSignal.timeout(timeoutMs)]);
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
        if (this.stopCtl.signal.aborted) {
          // Clean shutdown: hand the message straight back instead of waiting for the lease.
          await store.finish(id, token, "release");
          return;
        }
        result = { error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) };
      }

      const ok = result.status !== undefined && result.status >= 200 && result.status < 300;
      if (ok) {
        const cb = msg.callback && !msg.isCallback ? callbackMessage(msg.callback, msg, result, timeScale) : undefined;
        if ((await store.finish(id, token, "done", { cb })) === 1) stats.delivered++;
        if (cb) this.kick();
        return;
      }

      stats.failedAttempts++;
      if (msg.retried < msg.maxRetries) {
        const next: StoredMessage = { ...msg, retried: msg.retried + 1 };
        await store.finish(id, token, "retry", {
          msg: next,
          dueMs: Date.now() + retryDelayMs(msg, retryAfterMs) * timeScale,
        });
        return;
      }

      const dlq: DlqRecord = {
        dlqId: `${Date.now()}-${randomBytes(6).toString("hex")}`,
        addedAt: Date.now(),
        message: msg,
        response: result,
      };
      const cb =
        msg.failureCallback && !msg.isCallback
          ? callbackMessage(msg.failureCallback, msg, result, timeScale, dlq.dlqId)
          : undefined;
      if ((await store.finish(id, token, "dlq", { dlq, cb })) === 1) stats.dlq++;
      if (cb) this.kick();
    } catch (e) {
      // Redis trouble or a corrupt record: leave the lease to expire so the message is retried.
      console.error(`[local-qstash] delivery of ${id} failed internally: ${(e as Error).message}`);
    }
  }
}

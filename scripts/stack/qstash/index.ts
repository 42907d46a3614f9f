/**
 * Local QStash v2 stand-in: an HTTP server that the unmodified `@upstash/qstash` 2.12.0 SDK talks
 * to (publish, publishJSON, batch, batchJSON, messages.get/cancel, dlq.listMessages/delete/retry,
 * and `GET /v2/keys`), which delivers signed requests to the destinations with retries, backoff and
 * a dead-letter queue. Wire format: docs/protocols.md §3.
 *
 *   store.ts       all state, in Redis (layout and invariants there), so instances can share it
 *   delivery.ts    the poller: claim, sign, deliver, retry with backoff, DLQ, callbacks
 *   api.ts         the HTTP routes and their validation
 *   retry-expr.ts  the Upstash-Retry-Delay expression language
 *
 * Times: `timeScale` multiplies every relative delay (Upstash-Delay, default backoff, the
 * Upstash-Retry-Delay expression, Retry-After). Absolute instants (Upstash-Not-Before), delivery
 * timeouts and the dedup window are real time.
 */
import { type ApiContext, handleRequest, stoppingResponse } from "./api.ts";
import { DeliveryLoop, type QstashStats } from "./delivery.ts";
import { QstashStore } from "./store.ts";

export { parseDuration } from "./api.ts";
export { compileRetryDelay } from "./retry-expr.ts";

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
  /**
   * Longest Upstash-Delay accepted (before timeScale); longer ones are refused with a 400.
   * Default: one year, the hosted pay-as-you-go limit (7 days on the free plan, unlimited on
   * fixed pricing: `Infinity`).
   */
  maxDelayMs?: number;
}

export interface LocalQstashServer {
  url: string;
  port: number;
  stop(): Promise<void>;
  /** Counters of this instance only (not of other instances sharing the Redis). */
  stats(): QstashStats;
}

/** The hosted pay-as-you-go plan's maximum delay (docs qstash/features/delay). */
export const DEFAULT_MAX_DELAY_MS = 365 * 86_400_000;

export async function startLocalQstash(opts: LocalQstashOptions): Promise<LocalQstashServer> {
  const timeScale = opts.timeScale ?? 1;
  if (!(timeScale > 0) || !Number.isFinite(timeScale)) throw new Error("timeScale must be a positive number");
  const maxDelayMs = opts.maxDelayMs ?? DEFAULT_MAX_DELAY_MS;
  if (!(maxDelayMs > 0)) throw new Error("maxDelayMs must be a positive number (or Infinity)");
  const pollIntervalMs = Math.max(1, opts.pollIntervalMs ?? 100);

  const store = await QstashStore.connect(opts.redisHost, opts.redisPort, opts.keyPrefix ?? "qstash:");
  const stats: QstashStats = { published: 0, delivered: 0, failedAttempts: 0, dlq: 0 };
  const delivery = new DeliveryLoop(
    store,
    {
      currentSigningKey: opts.currentSigningKey,
      timeScale,
      pollIntervalMs,
      deliveryTimeoutMs: opts.deliveryTimeoutMs ?? 30_000,
    },
    stats,
  );
  const ctx: ApiContext = {
    store,
    delivery,
    stats,
    token: opts.token,
    currentSigningKey: opts.currentSigningKey,
    nextSigningKey: opts.nextSigningKey,
    timeScale,
    pollIntervalMs,
    defaultRetries: opts.defaultRetries ?? 3,
    maxDelayMs,
  };

  let stopping = false;
  const server = Bun.serve({
    port: opts.port ?? 0,
    hostname: opts.hostname ?? "127.0.0.1",
    fetch: (req, srv) => (stopping ? stoppingResponse() : handleRequest(ctx, req, srv.requestIP(req)?.address)),
  });
  const port = server.port ?? 0;
  const host = opts.hostname && opts.hostname !== "0.0.0.0" ? opts.hostname : "127.0.0.1";
  delivery.start();

  return {
    url: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
    port,
    stats: () => ({ ...stats }),
    async stop() {
      if (stopping) return;
      stopping = true;
      delivery.requestStop();
      await server.stop(true);
      await delivery.drain();
      store.close();
    },
  };
}

/**
 * An HTTP latency proxy in front of one stand-in (Upstash REST, PlanetScale HTTP, QStash): the
 * dependency as if it were `oneWayMs` away. Each request is held oneWayMs + U[0, jitterMs] before it
 * is forwarded, and the answer as long again (a fresh draw) before it is returned, so one call costs
 * ≈ 2 × oneWayMs. A caller that gives up while its request is held is never forwarded (`dropped`);
 * one that gives up while the answer is held never hears it, although the command ran. The distance
 * can be changed at runtime (`set`); a leg uses the distance in force when it starts. Milliseconds
 * throughout, fractions allowed. Used by startStack's `distance` (index.ts) and the tests.
 */
import { CLIENT_CLOSED, HttpRelay, holdUnlessAborted, requestBody } from "./http-relay.ts";

export interface Distance {
  /** Delay of each leg (request, answer), ms ≥ 0. */
  oneWayMs: number;
  /** Each leg adds a uniform draw from [0, jitterMs], ms ≥ 0 (default 0). */
  jitterMs?: number;
}

/** One answered call, in performance.now() milliseconds of this process, and the holds drawn for it. */
export interface HopTrace {
  receivedAt: number;
  forwardedAt: number;
  answeredAt: number;
  returnedAt: number;
  requestHoldMs: number;
  replyHoldMs: number;
}

export interface LatencyProxy {
  /** The target URL with the proxy's host: credentials and path kept. */
  url: string;
  /** Requests that reached the proxy, those forwarded to the target, and those whose caller gave up while held. */
  readonly seen: number;
  readonly forwarded: number;
  readonly dropped: number;
  /** The distance now in force. */
  readonly distance: Required<Distance>;
  /** The last call answered (undefined before the first). */
  readonly last: HopTrace | undefined;
  set(distance: Distance): void;
  stop(): Promise<void>;
}

/** The distance with its default, or an error naming the bad field (negative, NaN, infinite). */
export function checkDistance(d: Distance): Required<Distance> {
  const out = { oneWayMs: d.oneWayMs, jitterMs: d.jitterMs ?? 0 };
  for (const [k, v] of Object.entries(out))
    if (!Number.isFinite(v) || v < 0) throw new Error(`distance.${k} must be a finite number ≥ 0, got ${v}`);
  return out;
}

class LatencyRelay extends HttpRelay implements LatencyProxy {
  dropped = 0;
  last: HopTrace | undefined;
  #distance: Required<Distance>;

  constructor(target: string, initial: Distance) {
    const distance = checkDistance(initial);
    // A far dependency may hold a call longer than Bun's default 10 s idle limit: no limit here.
    super(target, { idleTimeout: 0 });
    this.#distance = distance;
  }

  get distance(): Required<Distance> {
    return { ...this.#distance };
  }

  set(next: Distance): void {
    this.#distance = checkDistance(next);
  }

  #draw(): number {
    return this.#distance.oneWayMs + Math.random() * this.#distance.jitterMs;
  }

  protected async handle(req: Request): Promise<Response> {
    const receivedAt = performance.now();
    const body = await requestBody(req);
    const requestHoldMs = this.#draw();
    if (!(await holdUnlessAborted(requestHoldMs, req.signal))) {
      this.dropped++;
      return CLIENT_CLOSED();
    }
    const forwardedAt = performance.now();
    const res = await this.forward(req, body);
    const answeredAt = performance.now();
    const replyHoldMs = this.#draw();
    await holdUnlessAborted(replyHoldMs);
    this.last = { receivedAt, forwardedAt, answeredAt, returnedAt: performance.now(), requestHoldMs, replyHoldMs };
    return res;
  }
}

/** `target` is the stand-in's base URL. */
export function startLatencyProxy(target: string, initial: Distance): LatencyProxy {
  return new LatencyRelay(target, initial);
}

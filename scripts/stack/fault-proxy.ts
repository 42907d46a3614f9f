/**
 * An HTTP fault proxy in front of a stand-in (Upstash REST, PlanetScale HTTP): the app talks to
 * the proxy through its production SDK, and the test switches, at runtime, what the network does:
 *
 *   pass          forward untouched
 *   delay(ms)     forward after `ms` (a slow dependency); a caller that gave up (aborted) before
 *                 then is never forwarded, like a request lost on a congested path (`match`: as
 *                 for replyDelay)
 *   fail          answer 502 with a gateway's plain-text body (not the dependency's own JSON);
 *                 `match` as for replyDelay
 *   replyDelay(ms) forward at once, hold the answer `ms` (the dependency did the work; its reply is
 *                 late). A caller that gives up meanwhile never hears it, although the command ran:
 *                 the "timeout is not a no" case. `match` limits the mode to requests whose body
 *                 contains the string, or one of the strings (e.g. scripts' SHA-1s); others pass.
 *   hold(ms)      a gate: matching requests wait until `release()` (or, as a safety bound so a test
 *                 can never hang, `ms`), then go on. A test learns which trips a response waited
 *                 for without timing it: an answer that arrives while the gate is shut did not
 *                 wait for any held request (`holding` = requests waiting at the gate now).
 *
 * Requests seen (and forwarded) are counted, so a test can prove that an open breaker makes no
 * calls. Bench scenarios use it too (scripts/bench/scenarios/slow-redis.ts).
 */
import { CLIENT_CLOSED, HttpRelay, holdUnlessAborted, requestBody } from "./http-relay.ts";

export type ProxyMode =
  | { kind: "pass" }
  | { kind: "delay"; ms: number; match?: string | string[] }
  | { kind: "fail"; match?: string | string[] }
  | { kind: "replyDelay"; ms: number; match?: string | string[] }
  | { kind: "hold"; ms: number; match?: string | string[] };

export interface FaultProxy {
  url: string;
  /** Requests that reached the proxy, and those it forwarded to the target. */
  readonly seen: number;
  readonly forwarded: number;
  /** Requests forwarded in replyDelay mode whose answer was held (the work was done regardless). */
  readonly held: number;
  /** Requests held in delay mode, counted when their hold starts (not yet forwarded then). */
  readonly delayed: number;
  /** Requests waiting at a `hold` gate now. */
  readonly holding: number;
  set(mode: ProxyMode): void;
  /** Opens the `hold` gate: every request waiting there goes on (the mode stays until `set`). */
  release(): void;
  stop(): Promise<void>;
}

class FaultRelay extends HttpRelay implements FaultProxy {
  held = 0;
  delayed = 0;
  holding = 0;
  #mode: ProxyMode = { kind: "pass" };
  #gate: (() => void)[] = [];

  release(): void {
    for (const open of this.#gate.splice(0)) open();
  }

  set(next: ProxyMode): void {
    this.#mode = next;
  }

  protected async handle(req: Request): Promise<Response> {
    const m = this.#mode;
    const body = await requestBody(req);
    // Decoded only when a mode names what it matches (pass mode, bench and most tests, decode nothing).
    let text: string | undefined;
    const matches = (match: string | string[] | undefined) => {
      if (match === undefined) return true;
      const haystack = (text ??= body === undefined ? "" : new TextDecoder().decode(body));
      return (typeof match === "string" ? [match] : match).some((x) => haystack.includes(x));
    };
    if (m.kind === "fail" && matches(m.match))
      return new Response("502 Bad Gateway", { status: 502, headers: { "content-type": "text/plain" } });
    if (m.kind === "hold" && matches(m.match)) {
      this.holding++;
      let open: () => void = () => {};
      const opened = new Promise<void>((r) => {
        open = r;
      });
      this.#gate.push(open);
      await Promise.race([opened, holdUnlessAborted(m.ms)]);
      this.#gate = this.#gate.filter((o) => o !== open);
      this.holding--;
      if (req.signal.aborted) return CLIENT_CLOSED();
    }
    const holdReply = m.kind === "replyDelay" && matches(m.match);
    if (m.kind === "delay" && matches(m.match)) {
      this.delayed++;
      if (!(await holdUnlessAborted(m.ms, req.signal))) return CLIENT_CLOSED();
    }
    const res = await this.forward(req, body);
    if (holdReply && m.kind === "replyDelay") {
      this.held++;
      // The target has answered (the command ran); the caller hears it only after `ms`, if at all.
      await holdUnlessAborted(m.ms);
    }
    return res;
  }
}

/** `target` is the stand-in's base URL; the returned `url` keeps its credentials and path. */
export function startFaultProxy(target: string): FaultProxy {
  return new FaultRelay(target);
}

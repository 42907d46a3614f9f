/**
 * An HTTP fault proxy in front of a stand-in (Upstash REST, PlanetScale HTTP): the app talks to
 * the proxy through its production SDK, and the test switches, at runtime, what the network does:
 *
 *   pass          forward untouched
 *   delay(ms)     forward after `ms` (a slow dependency); a caller that gave up (aborted) before
 *                 then is never forwarded, like a request lost on a congested path
 *   fail          answer 502 with a gateway's plain-text body (not the dependency's own JSON)
 *
 * Requests seen (and forwarded) are counted, so a test can prove that an open breaker makes no
 * calls. Bench scenarios use it too (scripts/bench/scenarios/slow-redis.ts).
 */
export type ProxyMode = { kind: "pass" } | { kind: "delay"; ms: number } | { kind: "fail" };

export interface FaultProxy {
  url: string;
  /** Requests that reached the proxy, and those it forwarded to the target. */
  readonly seen: number;
  readonly forwarded: number;
  set(mode: ProxyMode): void;
  stop(): Promise<void>;
}

/** `target` is the stand-in's base URL; the returned `url` keeps its credentials and path. */
export function startFaultProxy(target: string): FaultProxy {
  const t = new URL(target);
  let mode: ProxyMode = { kind: "pass" };
  let seen = 0;
  let forwarded = 0;
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      seen++;
      const m = mode;
      if (m.kind === "fail") return new Response("502 Bad Gateway", { status: 502, headers: { "content-type": "text/plain" } });
      const body = req.method === "GET" || req.method === "HEAD" ? undefined : await req.arrayBuffer();
      if (m.kind === "delay") {
        const aborted = await new Promise<boolean>((resolve) => {
          const timer = setTimeout(() => resolve(false), m.ms);
          req.signal.addEventListener("abort", () => {
            clearTimeout(timer);
            resolve(true);
          });
        });
        if (aborted) return new Response(null, { status: 499 });
      }
      const url = new URL(req.url);
      url.protocol = t.protocol;
      url.host = t.host;
      const headers = new Headers(req.headers);
      headers.delete("host");
      forwarded++;
      const res = await fetch(url, { method: req.method, headers, body });
      // Buffered: the stand-ins answer small bodies, and a re-streamed body would keep its encoding headers.
      const out = await res.arrayBuffer();
      const h = new Headers(res.headers);
      h.delete("content-encoding");
      h.delete("content-length");
      h.delete("transfer-encoding");
      return new Response(out, { status: res.status, headers: h });
    },
  });
  const url = new URL(target);
  url.host = `127.0.0.1:${server.port}`;
  url.protocol = "http:";
  return {
    url: url.toString().replace(/\/$/, target.endsWith("/") ? "/" : ""),
    get seen() {
      return seen;
    },
    get forwarded() {
      return forwarded;
    },
    set(next) {
      mode = next;
    },
    stop: async () => {
      await server.stop(true);
    },
  };
}

/**
 * What the HTTP proxies in front of the stand-ins share (fault-proxy.ts, latency-proxy.ts): the
 * server with its counters (HttpRelay), a hold that a caller's abort cuts short, the forward to the
 * stand-in with its answer buffered, and the proxy's own URL (the target's credentials and path
 * kept, its host swapped for the proxy's). Times are milliseconds (fractions allowed).
 */

/**
 * Resolves true once `ms` have passed by performance.now() (never earlier, although a timer may fire
 * a hair early), or false as soon as `signal` aborts (at once if it already has).
 */
export function holdUnlessAborted(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  if (!(ms > 0)) return Promise.resolve(true);
  const until = performance.now() + ms;
  return new Promise((resolve) => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const tick = () => {
      const left = until - performance.now();
      if (left > 0) {
        timer = setTimeout(tick, Math.max(1, Math.ceil(left)));
        return;
      }
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    timer = setTimeout(tick, ms);
  });
}

/** The request's body, read whole (undefined for GET/HEAD). */
export async function requestBody(req: Request): Promise<ArrayBuffer | undefined> {
  return req.method === "GET" || req.method === "HEAD" ? undefined : await req.arrayBuffer();
}

/**
 * Sends `req` (with `body`, already read) to the same path on `target`'s host. The answer is
 * buffered: the stand-ins answer small bodies, and a re-streamed body would keep its encoding headers.
 */
export async function forwardBuffered(req: Request, target: URL, body: ArrayBuffer | undefined): Promise<Response> {
  const url = new URL(req.url);
  url.protocol = target.protocol;
  url.host = target.host;
  const headers = new Headers(req.headers);
  headers.delete("host");
  const res = await fetch(url, { method: req.method, headers, body });
  const out = await res.arrayBuffer();
  const h = new Headers(res.headers);
  h.delete("content-encoding");
  h.delete("content-length");
  h.delete("transfer-encoding");
  return new Response(out, { status: res.status, headers: h });
}

/** `target` with its host replaced by the proxy's 127.0.0.1:`port` (credentials, path and trailing slash kept). */
export function proxyUrl(target: string, port: number): string {
  const url = new URL(target);
  url.host = `127.0.0.1:${port}`;
  url.protocol = "http:";
  return url.toString().replace(/\/$/, target.endsWith("/") ? "/" : "");
}

/** What a proxy answers a caller that gave up before its request was forwarded (nobody reads it). */
export const CLIENT_CLOSED = (): Response => new Response(null, { status: 499 });

/**
 * A proxy on a free 127.0.0.1 port in front of `target` (a stand-in's base URL); a subclass decides
 * what each request meets (`handle`) and sends it on with `forward`.
 */
export abstract class HttpRelay {
  /** Requests that reached the proxy, and those it forwarded to the target. */
  seen = 0;
  forwarded = 0;
  /** `target` with the proxy's host: credentials and path kept. */
  readonly url: string;
  readonly #target: URL;
  readonly #server: ReturnType<typeof Bun.serve>;

  /** `idleTimeout`: Bun.serve's, seconds (0: none; default Bun's 10 s). */
  constructor(target: string, opts: { idleTimeout?: number } = {}) {
    this.#target = new URL(target);
    this.#server = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      ...(opts.idleTimeout === undefined ? {} : { idleTimeout: opts.idleTimeout }),
      fetch: (req) => {
        this.seen++;
        return this.handle(req);
      },
    });
    this.url = proxyUrl(target, this.#server.port as number);
  }

  protected abstract handle(req: Request): Promise<Response>;

  protected forward(req: Request, body: ArrayBuffer | undefined): Promise<Response> {
    this.forwarded++;
    return forwardBuffered(req, this.#target, body);
  }

  async stop(): Promise<void> {
    await this.#server.stop(true);
  }
}

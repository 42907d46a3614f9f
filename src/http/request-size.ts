/**
 * Oversized requests, answered in the envelope: a URL longer than MAX_URL_BYTES or a header block
 * larger than MAX_HEADER_BYTES (names + values + 4 bytes of framing each) is a 431
 * HEADERS_TOO_LARGE before routing, the fast lane or any I/O (app.ts, outermost). CPU only: one
 * pass over the header list.
 *
 * The two limits add up to 14 KiB, below the smallest parser limit of our runtimes (Bun: 16 KiB
 * for the request line and headers), so every request a runtime hands us past them gets the
 * envelope. Past a runtime's own limit the runtime answers without calling us and cannot be made
 * to use our body: Bun a bare 431 (`connection: close`), Deno a bare 400 (hyper: past 20–70 KiB, measured), and
 * on Workers Cloudflare's edge with its own 414/431 page (docs/security.md "Oversized requests").
 */
import { requestIdOf } from "./edge.ts";

/** Longest URL (scheme, host, path and query) the app takes, in characters. */
export const MAX_URL_BYTES = 6 * 1024;
/** Largest header block the app takes, bytes counted as name + value + 4 (": " and CRLF) per header. */
export const MAX_HEADER_BYTES = 8 * 1024;

/** The 431 envelope for `req` if it is past either limit; undefined otherwise. */
export function oversizedResponse(req: Request): Response | undefined {
  let reason: string | undefined;
  if (req.url.length > MAX_URL_BYTES) reason = `the URL is longer than ${MAX_URL_BYTES} characters`;
  else {
    let bytes = 0;
    for (const [name, value] of req.headers) {
      bytes += name.length + value.length + 4;
      if (bytes > MAX_HEADER_BYTES) {
        reason = `the request headers are larger than ${MAX_HEADER_BYTES} bytes`;
        break;
      }
    }
  }
  if (reason === undefined) return undefined;
  const requestId = requestIdOf(req.headers);
  return new Response(JSON.stringify({ success: false, errorMsg: reason, code: "HEADERS_TOO_LARGE", requestId }), {
    status: 431,
    headers: {
      "content-type": "application/json; charset=UTF-8",
      "x-request-id": requestId,
      "cache-control": "no-store",
    },
  });
}

/**
 * What the contract's headers cost on Deno's HTTP server, with no app at all: a Deno.serve that
 * answers "Hello, World!" (`plain`), the same server answering a 330-byte JSON body with the 16
 * headers every API response carries (`headers`: request id, the security headers, CORS, ETag),
 * and that plus reading three request headers (`readhdr`: if-none-match, origin, user-agent, as the
 * L1 read does). Run each and drive it with wrk:
 *   node_modules/.bin/deno run -A scripts/micro/deno-contract-headers.ts plain 18777
 *   wrk -t1 -c64 -d4s http://127.0.0.1:18777/
 * Measured on this box (issue 15): plain 246k req/s, headers 78.6k (0.32), readhdr 67.0k (0.27):
 * the bound of any Deno route that honours the contract (the app's L1 read: 49.5k, 0.23 of the
 * same round's hello-world). On Bun the same bound is ~0.7 (docs/architecture.md "Fast lane").
 */
declare const Deno: {
  args: string[];
  serve(opts: { port: number; hostname: string }, handler: (req: Request) => Response): unknown;
};

export const HEADERS: [string, string][] = [
  ["content-type", "application/json"],
  ["x-content-type-options", "nosniff"],
  ["x-frame-options", "SAMEORIGIN"],
  ["strict-transport-security", "max-age=15552000; includeSubDomains"],
  ["x-xss-protection", "0"],
  ["x-dns-prefetch-control", "off"],
  ["x-download-options", "noopen"],
  ["x-permitted-cross-domain-policies", "none"],
  ["referrer-policy", "no-referrer"],
  ["cross-origin-resource-policy", "same-origin"],
  ["cross-origin-opener-policy", "same-origin"],
  ["origin-agent-cluster", "?1"],
  ["access-control-allow-origin", "*"],
  ["access-control-expose-headers", "x-request-id, etag, retry-after"],
  ["etag", '"abc-123"'],
  ["x-request-id", "3f2a9c1e-5b7d-4c8e-9a1f-2b3c4d5e6f70"],
];
const body = new TextEncoder().encode(JSON.stringify({ success: true, data: { id: 1, name: "x".repeat(300) } }));
const [mode = "plain", port = "18777"] = Deno.args;
Deno.serve({ port: Number(port), hostname: "127.0.0.1" }, (req) => {
  if (mode === "plain") return new Response("Hello, World!");
  const res = new Response(body, { status: 200 });
  for (const [k, v] of HEADERS) res.headers.set(k, v);
  if (mode === "readhdr") {
    req.headers.get("if-none-match");
    req.headers.get("origin");
    req.headers.get("user-agent");
  }
  return res;
});

/**
 * Responses built from a header template, the way the runtime builds them fastest
 * (`deps.runtime.headersByCopy`, src/runtime.ts). Measured per response with the lane's 16
 * headers plus one (scripts/micro/headers.bench.ts, µs, one core of this box):
 *
 *   runtime   copy a Headers, then Response   Response, then set each
 *   Bun        0.96                            1.74
 *   Deno      35.7                             3.3    (its Headers(Headers) and Response(…, { headers })
 *                                                     re-validate and sort every entry)
 *   workerd   11.0                            10.3
 *
 * The bench showed it: Deno's L1 read ran at 0.064 of its hello-world (74 µs of CPU per read, most
 * of it in these copies) while Bun's ran at 0.53.
 */
import type { Runtime } from "../runtime.ts";

export class HeaderTemplate {
  /** The same headers as pairs (combined per name, as Headers iterates them). */
  readonly entries: readonly (readonly [string, string])[];
  constructor(readonly headers: Headers) {
    this.entries = [...headers];
  }
}

/** A response with the template's headers; `extra` adds the per-request ones. */
export function respondWith(
  runtime: Runtime,
  template: HeaderTemplate,
  body: BodyInit | null,
  status: number,
  extra?: (h: Headers) => void,
): Response {
  if (runtime.headersByCopy) {
    const h = new Headers(template.headers);
    extra?.(h);
    return new Response(body, { status, headers: h });
  }
  const res = new Response(body, { status });
  const h = res.headers;
  // `set`, not `append`: a string body gave the response a default text/plain content-type.
  for (const [name, value] of template.entries) h.set(name, value);
  extra?.(h);
  return res;
}

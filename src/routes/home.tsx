/** @jsxImportSource hono/jsx */
import { Hono } from "hono";
import pkg from "../../package.json" with { type: "json" };
import { doc } from "../openapi/describe.ts";
import type { AppEnv } from "../types.ts";
import { Page } from "./site.tsx";

/** Where the front door points. `/console` is the operators' console. */
export const HOME_LINKS = [
  {
    href: "/console",
    title: "Console",
    text: "For operators: live sales, vouchers, operations. Sign in with the operator token.",
  },
  {
    href: "/docs",
    title: "API reference",
    text: "Every route, its parameters, responses and error codes, browsable and served by this app.",
  },
  {
    href: "/openapi.json",
    title: "OpenAPI document",
    text: "The same reference as OpenAPI 3.1 JSON, generated from the routes' own schemas.",
  },
  { href: "/health", title: "Health", text: "Redis and MySQL, probed separately; 503 when either is down." },
] as const;

const STYLE = `
body { font: 16px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1c1e21; background: #f6f7f9; }
main { max-width: 46rem; margin: 0 auto; padding: 3rem 1.25rem; }
h1 { font-size: 2rem; margin: 0 0 .25rem; }
.tag { color: #5f6b7a; margin: 0 0 2rem; }
ul { list-style: none; padding: 0; display: grid; gap: .75rem; }
li a { display: block; padding: 1rem 1.25rem; background: #fff; border: 1px solid #dde1e6; border-radius: .5rem; color: inherit; text-decoration: none; }
li a:hover, li a:focus { border-color: #2f6fde; }
li b { color: #2f6fde; }
code { font: .9em ui-monospace, SFMono-Regular, Menlo, monospace; background: #eceef1; padding: .1em .3em; border-radius: .25rem; }
footer { color: #5f6b7a; font-size: .875rem; margin-top: 2rem; }
`;

function Home() {
  return (
    <Page title="CityHub Edge" head={<style>{STYLE}</style>}>
      <main>
        <h1>CityHub Edge</h1>
        <p class="tag">Flash-sale backend of the CityHub shops-and-vouchers app.</p>
        <p>
          It serves the JSON API of the classic hm-dianping service under <code>/api</code> — shops, vouchers, notes,
          follows and seckill (flash-sale) orders — so its existing clients keep working. A seckill order is reserved in
          Redis in one script call and written to MySQL behind a queue; the same app runs on Bun, Deno and Cloudflare
          Workers.
        </p>
        <ul>
          {HOME_LINKS.map((l) => (
            <li>
              <a href={l.href}>
                <b>{l.title}</b> <code>{l.href}</code>
                <br />
                {l.text}
              </a>
            </li>
          ))}
        </ul>
        <footer>cityhub-edge {pkg.version}</footer>
      </main>
    </Page>
  );
}

const HTML_PAGE = { 200: { description: "An HTML page", content: { "text/html": { schema: { type: "string" } } } } };

/** Mounted at / (public). */
export const home = new Hono<AppEnv>().get(
  "/",
  doc(
    {
      tag: "site",
      summary: "Front door: what this service is, with links to the console, the API reference and /health",
      access: "public",
      responses: HTML_PAGE,
    },
    (c) => c.html(<Home />),
  ),
);

/** @jsxImportSource hono/jsx */
/**
 * The API reference: `/openapi.json` (generated from the app's own route table, src/openapi) and
 * `/docs`, Swagger UI from the `swagger-ui-dist` package — no CDN, so it works offline.
 *
 * Where the UI's files come from: on Bun and Deno this app reads them from node_modules (once per
 * process). On Workers they are static assets (wrangler.toml `[assets]`, staged by its `[build]`
 * command), which Cloudflare serves before the Worker runs; a Worker that is asked for one anyway
 * (no assets configured) answers 404.
 */
import { readFile } from "node:fs/promises";
import { type Hono, Hono as App } from "hono";
import { z } from "zod";
import { fail } from "../errors.ts";
import { doc } from "../openapi/describe.ts";
import { openApiDocument } from "../openapi/document.ts";
import type { AppEnv } from "../types.ts";
import { Page } from "./site.tsx";

/** URL prefix of the vendored UI files (wrangler.toml stages them under the same path). */
export const VENDOR_PREFIX = "/docs/assets/";

/** The swagger-ui-dist files the page loads, with their content types. */
export const VENDOR_FILES = {
  "swagger-ui.css": "text/css; charset=utf-8",
  "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
} as const;
type VendorFile = keyof typeof VENDOR_FILES;

/**
 * Our own start-up script (not inline, so a strict CSP could be added later). `validatorUrl: null`:
 * Swagger UI otherwise sends the document to an outside validator for its badge.
 */
const INIT_JS = `window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
});
`;
export const INIT_PATH = "/docs/init.js";

/** Read once per process; a failed read (e.g. on a Worker) is not kept. */
const vendorCache = new Map<VendorFile, Promise<Uint8Array<ArrayBuffer> | null>>();

function vendorFile(name: VendorFile): Promise<Uint8Array<ArrayBuffer> | null> {
  let file = vendorCache.get(name);
  if (!file) {
    file = (async () => {
      try {
        return new Uint8Array(await readFile(new URL(import.meta.resolve(`swagger-ui-dist/${name}`))));
      } catch {
        vendorCache.delete(name);
        return null;
      }
    })();
    vendorCache.set(name, file);
  }
  return file;
}

function DocsPage() {
  return (
    <Page
      title="CityHub Edge — API reference"
      styles={[`${VENDOR_PREFIX}swagger-ui.css`]}
      scripts={[`${VENDOR_PREFIX}swagger-ui-bundle.js`, INIT_PATH]}
      head={<style>{"body { margin: 0; } noscript p { font: 16px system-ui, sans-serif; padding: 1rem; }"}</style>}
    >
      <div id="swagger-ui" />
      <noscript>
        <p>
          The reference needs JavaScript. The document itself is <a href="/openapi.json">/openapi.json</a>.
        </p>
      </noscript>
    </Page>
  );
}

const text = (type: string, description: string) => ({
  200: { description, content: { [type]: { schema: { type: "string" } } } },
});
const VendorParam = z.object({ file: z.enum(Object.keys(VENDOR_FILES) as [VendorFile, ...VendorFile[]]) });

/** Mounted at / (public). Needs the app whose routes it documents. */
export function createDocs(app: Hono<AppEnv>): Hono<AppEnv> {
  return new App<AppEnv>()
    .get(
      "/openapi.json",
      doc(
        {
          tag: "site",
          summary: "This document: OpenAPI 3.1, generated from the routes' own schemas",
          access: "public",
          responses: {
            200: {
              description: "The OpenAPI document",
              content: { "application/json": { schema: { type: "object" } } },
            },
          },
        },
        async (c) => c.json(await openApiDocument(app)),
      ),
    )
    .get(
      "/docs",
      doc(
        {
          tag: "site",
          summary: "The API reference, browsable (Swagger UI served by this app)",
          access: "public",
          responses: text("text/html", "An HTML page"),
        },
        (c) => c.html(<DocsPage />),
      ),
    )
    .get(
      INIT_PATH,
      doc(
        {
          tag: "site",
          summary: "Start-up script of the API reference page",
          access: "public",
          responses: text("text/javascript", "JavaScript"),
        },
        (c) => c.body(INIT_JS, 200, { "content-type": "text/javascript; charset=utf-8", "cache-control": "no-cache" }),
      ),
    )
    .get(
      `${VENDOR_PREFIX}:file`,
      doc(
        {
          tag: "site",
          summary: "A file of the Swagger UI package (served as a static asset on Workers)",
          access: "public",
          params: VendorParam,
          responses: {
            ...text("text/css", "The stylesheet or script"),
            404: {
              description: "Not one of the page's files: NOT_FOUND",
              content: { "application/json": { schema: { $ref: "#/components/schemas/Failure" } } },
            },
          },
        },
        async (c) => {
          const name = c.req.param("file") ?? "";
          const body = Object.hasOwn(VENDOR_FILES, name) ? await vendorFile(name as VendorFile) : null;
          if (!body) return c.json(fail("NOT_FOUND", `no asset ${name}`, c.get("requestId")), 404);
          return c.body(body, 200, {
            "content-type": VENDOR_FILES[name as VendorFile],
            "cache-control": "public, max-age=3600",
          });
        },
      ),
    );
}

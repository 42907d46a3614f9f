/**
 * The console's static files: uPlot from the `uplot` package (read from node_modules on Bun and
 * Deno once per process; Workers static assets, staged by wrangler.toml's [build], on Workers)
 * and our own stylesheet and scripts, real files under console/assets/ imported as text like the
 * Lua (`with { type: "text" }`: Bun and Deno yield the source; on Workers wrangler.toml's Text rule
 * ships each as a text module). No inline script on any page.
 */
import { readFile } from "node:fs/promises";
import CSS from "./assets/console.css" with { type: "text" };
import SALE_JS from "./assets/sale.js" with { type: "text" };

export const ASSET_PREFIX = "/console/assets/";

/** Files of the `uplot` package the sale page loads (wrangler.toml stages the same two). */
export const VENDOR_FILES = {
  "uPlot.min.css": { path: "uplot/dist/uPlot.min.css", type: "text/css; charset=utf-8" },
  "uPlot.iife.min.js": { path: "uplot/dist/uPlot.iife.min.js", type: "text/javascript; charset=utf-8" },
} as const;
export type VendorFile = keyof typeof VENDOR_FILES;

/** Read once per process; a failed read (e.g. on a Worker, where the assets answer first) is not kept. */
const vendorCache = new Map<VendorFile, Promise<Uint8Array<ArrayBuffer> | null>>();

export function vendorFile(name: VendorFile): Promise<Uint8Array<ArrayBuffer> | null> {
  let file = vendorCache.get(name);
  if (!file) {
    file = (async () => {
      try {
        return new Uint8Array(await readFile(new URL(import.meta.resolve(VENDOR_FILES[name].path))));
      } catch {
        vendorCache.delete(name);
        return null;
      }
    })();
    vendorCache.set(name, file);
  }
  return file;
}

export const OWN_FILES = {
  "console.css": { body: CSS, type: "text/css; charset=utf-8" },
  "sale.js": { body: SALE_JS, type: "text/javascript; charset=utf-8" },
} as const;
export type OwnFile = keyof typeof OWN_FILES;

/**
 * The console's static files: uPlot from the `uplot` package (read from node_modules on Bun and
 * Deno once per process; Workers static assets, staged by wrangler.toml's [build], on Workers)
 * and our own stylesheet and scripts, served from these strings (no inline script on any page).
 */
import { readFile } from "node:fs/promises";

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

const CSS = `
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1c1e21; background: #f6f7f9; }
header { display: flex; gap: 1.25rem; align-items: center; padding: .6rem 1.25rem; background: #1f2933; color: #fff; }
header a { color: #cfe0ff; text-decoration: none; } header a:hover { text-decoration: underline; }
header b { margin-right: 1rem; } header form { margin-left: auto; }
main { max-width: 72rem; margin: 0 auto; padding: 1.5rem 1.25rem 3rem; }
h1 { font-size: 1.5rem; margin: 0 0 1rem; } h2 { font-size: 1.15rem; margin: 2rem 0 .5rem; }
table { border-collapse: collapse; background: #fff; width: 100%; font-size: .9rem; }
th, td { border: 1px solid #dde1e6; padding: .3rem .5rem; text-align: left; vertical-align: top; }
th { background: #eef1f4; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
form.card, section.card { background: #fff; border: 1px solid #dde1e6; border-radius: .5rem; padding: 1rem 1.25rem; margin: .75rem 0; }
label { display: block; margin: .5rem 0 .15rem; font-weight: 600; font-size: .85rem; }
input, textarea, select { font: inherit; padding: .3rem .45rem; border: 1px solid #b8c0c8; border-radius: .25rem; min-width: 16rem; }
input[aria-invalid="true"] { border-color: #c62828; }
.err { color: #c62828; font-size: .85rem; margin: .15rem 0 0; }
.note { color: #5f6b7a; font-size: .875rem; }
.flash { background: #e7f3e8; border: 1px solid #9fd3a5; padding: .5rem .75rem; border-radius: .25rem; }
.flash.bad { background: #fdecea; border-color: #f1a8a0; }
button { font: inherit; padding: .35rem .9rem; border: 0; border-radius: .25rem; background: #2f6fde; color: #fff; cursor: pointer; margin-top: .75rem; }
header button { margin: 0; background: #3e4c59; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(11rem, 1fr)); gap: .75rem; }
.stat { background: #fff; border: 1px solid #dde1e6; border-radius: .5rem; padding: .6rem .9rem; }
.stat span { display: block; color: #5f6b7a; font-size: .8rem; } .stat b { font-size: 1.6rem; font-variant-numeric: tabular-nums; }
.chart { background: #fff; border: 1px solid #dde1e6; border-radius: .5rem; padding: .5rem; margin: .75rem 0; }
.bad { color: #c62828; } .good { color: #2e7d32; }
`;

/** The live sale page: EventSource → numbers and two uPlot charts over the last 10 minutes. */
const SALE_JS = `(function () {
  "use strict";
  var root = document.getElementById("sale");
  if (!root) return;
  var url = root.getAttribute("data-events");
  var KEEP = 600;
  var t = [], stock = [], reserved = [], orders = [], pending = [], rate = [], okRate = [];
  var last = null;
  function el(k) { return root.querySelector('[data-k="' + k + '"]'); }
  function set(k, v) { var e = el(k); if (e) e.textContent = String(v); }
  function chart(id, title, series) {
    var box = document.getElementById(id);
    if (!box || typeof uPlot === "undefined") return null;
    var opts = { title: title, width: Math.max(320, box.clientWidth - 16), height: 240, series: [{}].concat(series), axes: [{}, {}], scales: { x: { time: true } } };
    return new uPlot(opts, [[], []].concat(series.slice(1).map(function () { return []; })), box);
  }
  var counts = chart("chart-counts", "Units", [
    { label: "stock left", stroke: "#2f6fde" },
    { label: "reservations", stroke: "#e07b00" },
    { label: "orders in MySQL", stroke: "#2e7d32" },
    { label: "outbox pending", stroke: "#c62828" }
  ]);
  var rates = chart("chart-rate", "Attempts per second (this isolate)", [
    { label: "attempts/s", stroke: "#6a1b9a" },
    { label: "reserved/s", stroke: "#2e7d32" }
  ]);
  function trim(a) { if (a.length > KEEP) a.splice(0, a.length - KEEP); }
  function total(o) { var n = 0; for (var k in o) n += o[k]; return n; }
  function onStats(ev) {
    var s = JSON.parse(ev.data);
    set("state", s.state);
    set("stockLeft", s.stockLeft);
    set("buckets", s.buckets.join(" · "));
    set("reservations", s.reservations);
    set("ordersInMysql", s.ordersInMysql);
    set("mysqlStock", s.mysqlStock);
    set("outboxPending", s.outboxPending);
    set("writerLagMs", s.writerLagMs);
    set("fastLaneSeckill", s.fastLaneSeckill);
    for (var k in s.outcomes) set("o-" + k, s.outcomes[k]);
    var a = total(s.outcomes), r = 0, ro = 0;
    if (last && s.at > last.at) {
      var dt = (s.at - last.at) / 1000;
      r = Math.max(0, (a - total(last.outcomes)) / dt);
      ro = Math.max(0, (s.outcomes.ok - last.outcomes.ok) / dt);
    }
    last = s;
    set("rate", r.toFixed(1));
    set("updated", new Date(s.at).toLocaleTimeString());
    t.push(s.at / 1000); stock.push(s.stockLeft); reserved.push(s.reservations); orders.push(s.ordersInMysql); pending.push(s.outboxPending);
    rate.push(r); okRate.push(ro);
    [t, stock, reserved, orders, pending, rate, okRate].forEach(trim);
    if (counts) counts.setData([t, stock, reserved, orders, pending]);
    if (rates) rates.setData([t, rate, okRate]);
  }
  var src = new EventSource(url);
  src.addEventListener("stats", onStats);
  src.addEventListener("error", function () { set("updated", "reconnecting…"); });
})();
`;

export const OWN_FILES = {
  "console.css": { body: CSS, type: "text/css; charset=utf-8" },
  "sale.js": { body: SALE_JS, type: "text/javascript; charset=utf-8" },
} as const;
export type OwnFile = keyof typeof OWN_FILES;

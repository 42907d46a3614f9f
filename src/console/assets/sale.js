// @ts-check
/**
 * The live sale page (/console/sale/{voucherId}, console/views.tsx SalePage): EventSource on the
 * page's `data-events` URL → the numbers (`[data-k]` elements) and two uPlot charts over the last
 * 10 minutes. A classic script (no modules): loaded after uPlot's IIFE build, which sets the
 * `uPlot` global. Served as text by console/assets.ts; type-checked by `tsc -p .` (allowJs,
 * this file's @ts-check) and linted by biome.
 */
(() => {
  /**
   * One `stats` event: console/sale.ts SaleSnapshot (the fields this page reads).
   * @typedef {{
   *   at: number; state: string; stockLeft: number; buckets: number[]; reservations: number;
   *   ordersInMysql: number; mysqlStock: number; outboxPending: number; writerLagMs: number;
   *   fastLaneSeckill: number; outcomes: Record<string, number>;
   *   shardCount: number; shards: { shard: number; stock: number; buyers: number; share: number | null }[];
   * }} Stats
   */
  /** @typedef {{ label: string; stroke: string }} Series */
  /** @typedef {{ setData(data: number[][]): void }} Chart */
  /** @typedef {new (opts: object, data: number[][], target: HTMLElement) => Chart} ChartCtor */

  const root = document.getElementById("sale");
  if (!root) return;
  const url = root.getAttribute("data-events");
  if (!url) return;
  const KEEP = 600;
  /** @type {number[]} */ const t = [];
  /** @type {number[]} */ const stock = [];
  /** @type {number[]} */ const reserved = [];
  /** @type {number[]} */ const orders = [];
  /** @type {number[]} */ const pending = [];
  /** @type {number[]} */ const rate = [];
  /** @type {number[]} */ const okRate = [];
  /** @type {Stats | null} */
  let last = null;

  /** @param {string} k @param {string | number} v */
  function set(k, v) {
    const e = root?.querySelector(`[data-k="${k}"]`);
    if (e) e.textContent = String(v);
  }

  /** @returns {ChartCtor | undefined} the uPlot global, when its script loaded */
  function uPlotCtor() {
    return /** @type {{ uPlot?: ChartCtor }} */ (/** @type {unknown} */ (window)).uPlot;
  }

  /** @param {string} id @param {string} title @param {Series[]} series @returns {Chart | null} */
  function chart(id, title, series) {
    const box = document.getElementById(id);
    const UPlot = uPlotCtor();
    if (!box || !UPlot) return null;
    const opts = {
      title,
      width: Math.max(320, box.clientWidth - 16),
      height: 240,
      series: [{}, ...series],
      axes: [{}, {}],
      scales: { x: { time: true } },
    };
    return new UPlot(opts, [[], ...series.map(() => [])], box);
  }

  const counts = chart("chart-counts", "Units", [
    { label: "stock left", stroke: "#2f6fde" },
    { label: "reservations", stroke: "#e07b00" },
    { label: "orders in MySQL", stroke: "#2e7d32" },
    { label: "outbox pending", stroke: "#c62828" },
  ]);
  const rates = chart("chart-rate", "Attempts per second", [
    { label: "attempts/s", stroke: "#6a1b9a" },
    { label: "reserved/s", stroke: "#2e7d32" },
  ]);

  /** @param {number[]} a */
  function trim(a) {
    if (a.length > KEEP) a.splice(0, a.length - KEEP);
  }

  /** @param {Record<string, number>} o */
  function total(o) {
    let n = 0;
    for (const k in o) n += o[k] ?? 0;
    return n;
  }

  /** @param {MessageEvent<string>} ev */
  function onStats(ev) {
    /** @type {Stats} */
    const s = JSON.parse(ev.data);
    set("state", s.state);
    set("stockLeft", s.stockLeft);
    set("buckets", s.buckets.join(" · "));
    set("reservations", s.reservations);
    set("ordersInMysql", s.ordersInMysql);
    set("mysqlStock", s.mysqlStock);
    set("outboxPending", s.outboxPending);
    set("writerLagMs", s.writerLagMs);
    set("fastLaneSeckill", s.fastLaneSeckill);
    for (const k in s.outcomes) set(`o-${k}`, s.outcomes[k] ?? 0);
    for (const x of s.shards ?? []) {
      set(`shard-${x.shard}-stock`, x.stock);
      set(`shard-${x.shard}-buyers`, x.buyers);
      set(`shard-${x.shard}-share`, x.share ?? "not loaded");
    }
    const a = total(s.outcomes);
    let r = 0;
    let ro = 0;
    if (last && s.at > last.at) {
      const dt = (s.at - last.at) / 1000;
      r = Math.max(0, (a - total(last.outcomes)) / dt);
      ro = Math.max(0, ((s.outcomes.ok ?? 0) - (last.outcomes.ok ?? 0)) / dt);
    }
    last = s;
    set("rate", r.toFixed(1));
    set("updated", new Date(s.at).toLocaleTimeString());
    t.push(s.at / 1000);
    stock.push(s.stockLeft);
    reserved.push(s.reservations);
    orders.push(s.ordersInMysql);
    pending.push(s.outboxPending);
    rate.push(r);
    okRate.push(ro);
    for (const series of [t, stock, reserved, orders, pending, rate, okRate]) trim(series);
    if (counts) counts.setData([t, stock, reserved, orders, pending]);
    if (rates) rates.setData([t, rate, okRate]);
  }

  const src = new EventSource(url);
  src.addEventListener("stats", onStats);
  src.addEventListener("error", () => set("updated", "reconnecting…"));
})();

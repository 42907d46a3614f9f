// sale.js is a browser script, served as text: console/assets.ts imports it `with { type: "text" }`
// (Bun, Deno and wrangler's Text rule all yield the file's source), so to the server the module is
// one string. This declaration says so to the type checker, which checks sale.js itself as the
// browser script it is (allowJs + its @ts-check).
declare const source: string;
export default source;

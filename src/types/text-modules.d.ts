// Lua sources are imported as text: `with { type: "text" }` under Bun, a `Text` rule in wrangler.toml.
declare module "*.lua" {
  const source: string;
  export default source;
}
// The console's stylesheets, likewise (console/assets.ts). Its browser scripts are .js files the
// type checker reads as JavaScript (allowJs): each has a sibling .d.ts saying its text is a string.
declare module "*.css" {
  const source: string;
  export default source;
}

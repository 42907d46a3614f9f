// Lua sources are imported as text: `with { type: "text" }` under Bun, a `Text` rule in wrangler.toml.
declare module "*.lua" {
  const source: string;
  export default source;
}

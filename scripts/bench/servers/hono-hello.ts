/**
 * Bench server: Hono hello-world on Bun.serve — what the framework costs over bare Bun.serve.
 * Same body and content type as bun-hello.ts so only the routing/context layer differs.
 * Env HELLO_METHODS (default GET): the methods GET / … answers, comma-separated.
 */
import { Hono } from "hono";

const app = new Hono();
// HELLO_METHODS=GET,POST also answers POST / (the baseline of the seckill sold-out row, which POSTs).
for (const method of (process.env.HELLO_METHODS ?? "GET").split(","))
  app.on(method.trim().toUpperCase(), "/", (c) => c.text("Hello, World!"));

const server = Bun.serve({
  port: Number(process.env.PORT ?? 0),
  hostname: "127.0.0.1",
  fetch: app.fetch,
});
console.log(`hono-hello listening on ${server.url.href}`);
process.on("SIGTERM", () => {
  void server.stop(true).finally(() => process.exit(0));
});

/**
 * Bench server: bare Bun.serve hello-world, the floor for any HTTP handler on this box.
 * Started by scenarios/http-bun-bare.ts in its own process; listens on 127.0.0.1:$PORT.
 */
const body = "Hello, World!";
const server = Bun.serve({
  port: Number(process.env.PORT ?? 0),
  hostname: "127.0.0.1",
  fetch: () => new Response(body, { headers: { "content-type": "text/plain; charset=UTF-8" } }),
});
console.log(`bun-hello listening on ${server.url.href}`);
// Exit promptly on SIGTERM: the runner waits for the child before the next scenario.
process.on("SIGTERM", () => {
  void server.stop(true).finally(() => process.exit(0));
});

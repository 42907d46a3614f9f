/**
 * Bench Worker: Hono hello-world as a Workers module — the workerd rows' baseline (group
 * "runtime-workerd"), the same app as servers/hono-hello.ts and servers/deno-hello.ts (GET / and
 * POST / answer "Hello, World!", text/plain). Not run directly: lib/worker-bundle.ts bundles it with
 * `wrangler deploy --dry-run` like the real Worker and servers/workerd-serve.ts serves the bundle.
 */
import { Hono } from "hono";

const app = new Hono();
app.on(["GET", "POST"], "/", (c) => c.text("Hello, World!"));

export default app;

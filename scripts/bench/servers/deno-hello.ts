/**
 * Bench server: Hono hello-world on Deno.serve — the Deno rows' baseline (group "runtime-deno"),
 * the same app as servers/hono-hello.ts (GET / and POST / answer "Hello, World!", text/plain) so
 * only the runtime differs. Run: `node_modules/.bin/deno run -A scripts/bench/servers/deno-hello.ts`
 * with PORT (and HOST, default 127.0.0.1) set; Hono comes from the repo's node_modules.
 */
import { Hono } from "hono";

declare const Deno: {
  env: { get(k: string): string | undefined };
  serve(
    opts: { port: number; hostname: string; onListen?: (a: { port: number; hostname: string }) => void },
    handler: (req: Request) => Response | Promise<Response>,
  ): unknown;
};

const app = new Hono();
app.on(["GET", "POST"], "/", (c) => c.text("Hello, World!"));

const port = Number(Deno.env.get("PORT") ?? 0);
const hostname = Deno.env.get("HOST") ?? "127.0.0.1";
Deno.serve(
  { port, hostname, onListen: (a) => console.log(`deno-hello listening on http://${a.hostname}:${a.port}/`) },
  app.fetch,
);

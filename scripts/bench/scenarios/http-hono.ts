/** Group "http": Hono's routing and Context on top of Bun.serve, vs the bare baseline. */
import { join } from "node:path";
import { spawnBunServer } from "../lib/proc.ts";
import { defineScenario } from "../types.ts";

export default defineScenario({
  name: "hono-hello",
  group: "http",
  description: "GET / on a Hono hello-world served by Bun.serve (own bun process), loaded by wrk",
  async setup() {
    const server = await spawnBunServer({ script: join(import.meta.dir, "../servers/hono-hello.ts") });
    return { kind: "http", url: `${server.url}/`, teardown: server.stop };
  },
});

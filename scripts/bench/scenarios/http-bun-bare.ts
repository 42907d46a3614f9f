/** Baseline of group "http": the cheapest possible Bun HTTP response. */
import { join } from "node:path";
import { spawnBunServer } from "../lib/proc.ts";
import { defineScenario } from "../types.ts";

export default defineScenario({
  name: "bun-serve-bare",
  group: "http",
  baseline: true,
  description: "GET / on a bare Bun.serve hello-world (own bun process), loaded by wrk",
  async setup() {
    const server = await spawnBunServer({ script: join(import.meta.dir, "../servers/bun-hello.ts") });
    return { kind: "http", url: `${server.url}/`, teardown: server.stop };
  },
});

/**
 * Cloudflare Workers entry: fetch + scheduled. Deps and app are built lazily on the first event
 * of an isolate from its bindings and reused for every later request in that isolate.
 */
import type { Hono } from "hono";
import { createApp } from "../app.ts";
import { createDeps, type Deps } from "../deps.ts";
import { ConfigError, parseEnv } from "../env.ts";
import { runCron } from "../jobs/index.ts";
import type { ClientEnv } from "../http/client-ip.ts";
import { runtimes } from "../runtime.ts";
import type { AppEnv } from "../types.ts";

type Bindings = Record<string, unknown>;

let built: { deps: Deps; app: Hono<AppEnv> } | undefined;

function build(env: Bindings) {
  if (!built) {
    // workerd: no request may await I/O another request started (src/runtime.ts).
    const deps = createDeps(parseEnv(env), { runtime: runtimes.workerd });
    built = { deps, app: createApp(deps) };
    // One line per isolate: operators (and tests) can tell a fresh isolate from a warm one.
    deps.log.info("isolate started", { runtime: "workerd" });
  }
  return built;
}

function badEnvironment(err: unknown): Response {
  const message = err instanceof ConfigError ? err.message : String(err);
  console.error(JSON.stringify({ level: "error", msg: "BAD_ENVIRONMENT", error: message }));
  return Response.json({ success: false, code: "BAD_ENVIRONMENT", errorMsg: "service misconfigured" }, { status: 500 });
}

export default {
  async fetch(request, env, ctx) {
    let app: ReturnType<typeof build>["app"];
    try {
      app = build(env).app;
    } catch (err) {
      return badEnvironment(err);
    }
    // The app never reads bindings per request (deps hold the config); it gets only the client
    // address, which on Workers is `cf-connecting-ip`: Cloudflare's edge sets it and overwrites a
    // client's own. Nowhere else is that header believed (src/http/client-ip.ts).
    const client: ClientEnv = { clientIp: request.headers.get("cf-connecting-ip") ?? undefined };
    return await app.fetch(request, client, ctx);
  },
  async scheduled(controller, env, ctx) {
    const { deps } = build(env);
    ctx.waitUntil(runCron({ ...deps, waitUntil: (p) => ctx.waitUntil(p) }, controller.cron, controller.scheduledTime));
  },
} satisfies ExportedHandler<Bindings>;

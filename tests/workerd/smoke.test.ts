/**
 * Workers smoke test (docs/runtimes.md): build the bundle offline with `wrangler deploy --dry-run`
 * — proving the bundle, the Lua text modules and `nodejs_compat` — then boot that exact output in
 * workerd through miniflare, bound to the per-process test stack, and exercise fetch + scheduled.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import type { Readable } from "node:stream";
import { Miniflare } from "miniflare";
import { buildWorker, repoRoot, type WorkerBundle } from "../support/build-worker.ts";
import { eventually, getStack } from "../support/stack.ts";

const wranglerToml = readFileSync(join(repoRoot, "wrangler.toml"), "utf8");
const compatibilityDate = /^compatibility_date\s*=\s*"([^"]+)"/m.exec(wranglerToml)?.[1];
const compatibilityFlags = JSON.parse(
  /^compatibility_flags\s*=\s*(\[[^\]]*\])/m.exec(wranglerToml)?.[1] ?? "[]",
) as string[];
const crons = JSON.parse(/^crons\s*=\s*(\[[^\]]*\])/m.exec(wranglerToml)?.[1] ?? "[]") as string[];

/** Lua files under lua/ that some module in src/ imports (the ones the Worker must ship). */
function luaImportedBySrc(): string[] {
  const found = new Set<string>();
  for (const rel of readdirSync(join(repoRoot, "src"), { recursive: true }) as string[]) {
    if (!/\.[cm]?ts$/.test(rel)) continue;
    for (const m of readFileSync(join(repoRoot, "src", rel), "utf8").matchAll(
      /from\s+["'][./]*\/lua\/([a-z0-9-]+\.lua)["']/g,
    ))
      found.add(m[1]!);
  }
  return [...found].sort();
}

const outdir = mkdtempSync(join(tmpdir(), "cityhub-worker-"));
let bundle: WorkerBundle;
let mf: Miniflare | undefined;
/** The operator secret the Worker is bound to (the stack's ADMIN_TOKEN). */
let stackAdminToken = "";
/** workerd's stdout/stderr (the Worker's console), attached to failures instead of flooding the run. */
const runtimeLog: string[] = [];

async function withRuntimeLog<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof Error) err.message += `\n--- workerd output ---\n${runtimeLog.join("").slice(-4000)}`;
    throw err;
  }
}

beforeAll(async () => {
  const [built, stack] = await Promise.all([buildWorker(outdir), getStack()]);
  bundle = built;
  const modules = bundle.modules.map((m) => ({ type: m.type, path: m.path }));
  const common = { modules, modulesRoot: outdir, compatibilityDate, compatibilityFlags };
  const { UPSTASH_REDIS_REST_TOKEN: _omitted, ...withoutRedisToken } = stack.env;
  const { PUBLIC_URL: _unset, ...withoutPublicUrl } = stack.env;
  stackAdminToken = String(stack.env.ADMIN_TOKEN);
  mf = new Miniflare({
    handleRuntimeStdio(stdout: Readable, stderr: Readable) {
      stdout.on("data", (b: Buffer) => runtimeLog.push(b.toString()));
      stderr.on("data", (b: Buffer) => runtimeLog.push(b.toString()));
    },
    workers: [
      // Configured like a deployment: the stack's variables stand in for wrangler [vars] + secrets.
      // One login-code send per address per hour, so the client-address test sees the limit at once.
      { name: "edge", ...common, bindings: { ...stack.env, LOG_LEVEL: "warn", LOGIN_CODE_SENDS_PER_IP_HOUR: "1" } },
      // Same bundle with a required secret not bound.
      { name: "misconfigured", ...common, bindings: { ...withoutRedisToken, LOG_LEVEL: "warn" } },
      // A deployment whose [vars] lack PUBLIC_URL: QStash would deliver its callbacks nowhere.
      { name: "no-public-url", ...common, bindings: { ...withoutPublicUrl, LOG_LEVEL: "warn" } },
    ],
  });
  await mf.ready;
}, 60_000);

afterAll(async () => {
  await mf?.dispose();
  rmSync(outdir, { recursive: true, force: true });
}, 15_000);

describe("Workers bundle (wrangler deploy --dry-run)", () => {
  test("wrangler.toml pins nodejs_compat, a compatibility date and the minute cron", () => {
    expect(compatibilityDate).toMatch(/^\d{4}-\d{2}-\d{2}$/);
    expect(compatibilityFlags).toContain("nodejs_compat");
    expect(crons).toContain("* * * * *");
  });

  test("the bundle exists and ships every Lua script src/ imports as a text module, byte for byte", () => {
    const main = readFileSync(bundle.main, "utf8");
    expect(main.length).toBeGreaterThan(10_000);
    const imported = luaImportedBySrc();
    expect(imported).toContain("unlock.lua");
    expect(readFileSync(join(repoRoot, "lua/unlock.lua"), "utf8")).toContain("redis.call");
    for (const file of imported) {
      const source = readFileSync(join(repoRoot, "lua", file), "utf8");
      // wrangler.toml `rules` make each one an attached Text module that worker.js imports.
      const attached = bundle.modules.find((m) => m.type === "Text" && basename(m.path).endsWith(`-${file}`));
      expect(attached?.path ?? `no Text module for lua/${file} in ${bundle.outdir}`).toEndWith(`-${file}`);
      expect(readFileSync(attached!.path, "utf8")).toBe(source);
      expect(main).toContain(`"./${basename(attached!.path)}"`);
    }
    // Never a file path in place of the source (what Bun yields without its text loader).
    expect(main).not.toMatch(/["'][^"'\n]*\/lua\/[a-z0-9-]+\.lua["']/);
  });
});

describe("Workers bundle in workerd (miniflare)", () => {
  test(
    "GET /health is 200 with Redis and MySQL green (outbound fetch to the stand-ins on loopback)",
    () =>
      withRuntimeLog(async () => {
        const res = await mf!.dispatchFetch("http://edge.test/health");
        const body = (await res.json()) as { success: boolean; data: { ok: boolean; redis: string; mysql: string } };
        expect({ status: res.status, body }).toEqual({
          status: 200,
          body: { success: true, data: { ok: true, redis: "up", mysql: "up" } },
        });
        expect(res.headers.get("x-request-id")).toBeString();
        // The breakers (cockatiel, loaded on first use) work across requests in workerd: a second
        // request's probes run through the guards the first one built, and both stay closed.
        // The operator's view carries the breakers.
        const admin = { headers: { authorization: `Bearer ${stackAdminToken}` } };
        const again = (await (await mf!.dispatchFetch("http://edge.test/health", admin)).json()) as {
          data: { ok: boolean; breakers: Record<string, { state: string; calls: number }> };
        };
        expect(again.data.ok).toBe(true);
        expect(again.data.breakers.redis).toMatchObject({ state: "closed" });
        expect(again.data.breakers.mysql?.calls).toBeGreaterThanOrEqual(2);
      }),
    15_000,
  );

  test(
    "each of concurrent requests reports its own dependency trips in Server-Timing (no request sees another's)",
    () =>
      withRuntimeLog(async () => {
        // workerd runs these in one isolate at once: the counts hang off each request's async context.
        const pages = [101, 102, 103, 104];
        const headers = await Promise.all(
          pages.map(async (p) => {
            const res = await mf!.dispatchFetch(`http://edge.test/api/blog/hot?current=${p}`);
            await res.arrayBuffer();
            return res.headers.get("server-timing");
          }),
        );
        // One page query each (beside it a Redis call may run, and background work may be in flight).
        for (const h of headers) {
          expect(h).toMatch(/(^|, )db;desc="1 trip";dur=[\d.]+, /);
          expect(h).toMatch(/, trips;desc="1 in sequence"(, |$)/);
        }
      }),
    15_000,
  );

  test(
    "an unknown route is a 404 JSON envelope with code NOT_FOUND",
    () =>
      withRuntimeLog(async () => {
        const res = await mf!.dispatchFetch("http://edge.test/api/nope");
        expect(res.status).toBe(404);
        expect(res.headers.get("content-type")).toContain("application/json");
        const rid = res.headers.get("x-request-id");
        expect(rid).toBeString();
        expect(await res.json()).toEqual({
          success: false,
          code: "NOT_FOUND",
          errorMsg: "no route for GET /api/nope",
          requestId: rid as string,
        });
      }),
    15_000,
  );

  test(
    "the client address on Workers is cf-connecting-ip (per-IP limits follow it)",
    () =>
      withRuntimeLog(async () => {
        const ip = () =>
          `10.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}.${1 + Math.floor(Math.random() * 250)}`;
        const phone = () => `139${String(Math.floor(Math.random() * 1e8)).padStart(8, "0")}`;
        const send = async (address: string) =>
          (
            await mf!.dispatchFetch(`http://edge.test/api/user/code?phone=${phone()}`, {
              method: "POST",
              headers: { "cf-connecting-ip": address },
            })
          ).status;
        const a = ip();
        expect(await send(a)).toBe(200);
        expect(await send(a)).toBe(429);
        expect(await send(ip())).toBe(200);
      }),
    15_000,
  );

  test(
    "a Worker with a binding missing answers 500 BAD_ENVIRONMENT without leaking details",
    () =>
      withRuntimeLog(async () => {
        const worker = await mf!.getWorker("misconfigured");
        const res = await worker.fetch("http://edge.test/health");
        expect(res.status).toBe(500);
        expect(await res.json()).toEqual({
          success: false,
          code: "BAD_ENVIRONMENT",
          errorMsg: "service misconfigured",
        });
      }),
    15_000,
  );

  test(
    "a Worker without PUBLIC_URL refuses to start (500 BAD_ENVIRONMENT) and logs the missing setting's name",
    () =>
      withRuntimeLog(async () => {
        const before = runtimeLog.join("").length;
        const worker = await mf!.getWorker("no-public-url");
        const res = await worker.fetch("http://edge.test/health");
        expect(res.status).toBe(500);
        expect(((await res.json()) as { code: string }).code).toBe("BAD_ENVIRONMENT");
        // workerd's stderr reaches this process through a pipe: wait for the line, never a sleep.
        await eventually("the BAD_ENVIRONMENT line naming PUBLIC_URL", async () =>
          /BAD_ENVIRONMENT.*PUBLIC_URL is required/.test(runtimeLog.join("").slice(before)),
        );
      }),
    15_000,
  );

  test(
    "the scheduled handler runs for the configured cron and completes ok",
    () =>
      withRuntimeLog(async () => {
        const worker = await mf!.getWorker("edge");
        const result = await worker.scheduled({ cron: "* * * * *", scheduledTime: new Date() });
        expect(result.outcome).toBe("ok");
        // Contrast: the same handler on a misconfigured Worker throws, so "ok" above means it ran.
        const bad = await (await mf!.getWorker("misconfigured")).scheduled({ cron: "* * * * *" });
        expect(bad.outcome).toBe("exception");
      }),
    15_000,
  );
});

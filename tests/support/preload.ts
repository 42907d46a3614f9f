/**
 * Test preload (bunfig.toml): one private stack per `bun test` process — real redis-server and
 * MariaDB on free ports with throw-away data, behind the stand-ins — migrated once. Test files
 * get it through `getStack()` (tests/support/stack.ts); they never touch the developer's .local data.
 * Seckill shard databases are not part of it: a test that needs them asks getShardStack(n)
 * (tests/support/shards.ts), and the afterAll below stops whatever was started. It is near (no
 * latency proxies): a test that wants its dependencies far starts its own stack with a `distance`
 * (startPrivateStack in tests/support/runtimes.ts, or startStack).
 */
import { afterAll } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runMigrations } from "../../scripts/migrate.ts";
import { startStack, type Stack } from "../../scripts/stack/index.ts";
import { freePort } from "../../scripts/stack/engines.ts";
import { stopShardStacks } from "./shards.ts";

declare global {
  // eslint-disable-next-line no-var
  var __cityhubStack: Promise<Stack> | undefined;
}

process.env.UPSTASH_DISABLE_TELEMETRY = "1";

if (!globalThis.__cityhubStack) {
  const dir = mkdtempSync(join(tmpdir(), "cityhub-test-"));
  globalThis.__cityhubStack = (async () => {
    // Test-only signing keys and a callback address where nothing listens (apps that need
    // callbacks serve themselves and set PUBLIC_URL): test messages can never reach a developer's
    // `npm run dev` app on :8787, which trusts the dev keys.
    const rand = () => crypto.randomUUID().replace(/-/g, "");
    const stack = await startStack({
      dir,
      database: "cityhub_test",
      qstashTimeScale: 0.01,
      qstashPollMs: 20,
      adminToken: "test-admin-token-0123456789abcdefghijklmn",
      qstashKeys: { token: `test_${rand()}`, currentSigningKey: `sig_${rand()}`, nextSigningKey: `sig_${rand()}` },
      publicUrl: `http://127.0.0.1:${await freePort()}`,
    });
    await runMigrations(stack.env.DATABASE_URL as string);
    return stack;
  })();
  afterAll(async () => {
    await stopShardStacks();
    const stack = await globalThis.__cityhubStack?.catch(() => undefined);
    await stack?.stop();
    rmSync(dir, { recursive: true, force: true });
    // A file that finishes before the stack has started waits here for the start and the stop:
    // seconds on a loaded machine, past the 5 s default of a hook.
  }, 60_000);
}

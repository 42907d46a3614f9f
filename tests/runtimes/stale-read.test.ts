/**
 * Runtime matrix: a shop value past its L1 freshness (src/cache/policy.ts l1StaleMs) is answered
 * from the isolate's memory while one refresh runs in the `waitUntil` of the request that found it
 * stale. On workerd no request may await another's I/O (src/runtime.ts): the readers after the
 * first must answer from memory while that refresh is still out, not join it.
 *
 * A fault proxy in front of the Upstash-REST stand-in holds the cache probe at a gate. The test
 * reads the shop every ~50 ms (a poll on a condition, not a sleep) until a read is answered while
 * a probe waits at the gate: the L1 copy went stale, the answer came from memory and its refresh is
 * held. Then more readers are answered with the gate still shut and still one probe held, and once
 * the gate opens the refresh lands. Run one runtime with RUNTIMES=workerd.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type FaultProxy, startFaultProxy } from "../../scripts/stack/fault-proxy.ts";
import { luaSources } from "../../src/redis/scripts.ts";
import {
  guardedBy,
  type RuntimeServer,
  selectedRuntimes,
  stackAppEnv,
  startRuntime,
  workerBundle,
} from "../support/runtimes.ts";
import { createSaleOverHttp } from "../support/sale-checks.ts";
import { retireVouchers } from "../support/seckill.ts";
import { eventually, getStack } from "../support/stack.ts";

const sha1 = (text: string) => new Bun.CryptoHasher("sha1").update(text).digest("hex");
const PROBE = sha1(luaSources.cacheProbe);
/** The gate's safety bound, ms: a read that waits for the held probe answers only after it (and fails below). */
const HOLD_MS = 8_000;

let dir = "";
let failed = false;
const created: number[] = [];
let retireWith: RuntimeServer | undefined;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "cityhub-matrix-stale-read-"));
  if (selectedRuntimes().includes("workerd")) await workerBundle(dir);
}, 120_000);

afterAll(async () => {
  if (retireWith) await retireVouchers(retireWith.driver(), created);
  if (failed || process.env.MATRIX_KEEP_DIR) console.error(`runtime matrix (stale read): logs kept in ${dir}`);
  else if (dir) rmSync(dir, { recursive: true, force: true });
});

describe.each(selectedRuntimes())("runtime matrix: a stale L1 value is answered from memory on %s", (name) => {
  let server: RuntimeServer | undefined;
  let proxy: FaultProxy | undefined;
  const guarded = guardedBy(
    name,
    () => server,
    () => {
      failed = true;
    },
  );

  beforeAll(async () => {
    const stack = await getStack();
    proxy = startFaultProxy(stack.env.UPSTASH_REDIS_REST_URL as string);
    server = await startRuntime(name, {
      dir,
      // The Redis deadline outlasts the gate: a read waiting for the held probe sees it through.
      env: stackAppEnv(stack, {
        UPSTASH_REDIS_REST_URL: proxy.url,
        REDIS_TIMEOUT_MS: String(HOLD_MS * 2),
        // The polling reads below would otherwise promote the shop to the hot-key L1 TTL (30 s).
        HOT_KEY_READS: "0",
      }),
    });
    retireWith ??= server;
  }, 90_000);

  afterAll(async () => {
    proxy?.release();
    await server?.stop();
    await proxy?.stop();
  }, 20_000);

  test(
    "readers past the L1 freshness are answered while the one refresh's probe is held, and the refresh lands once it is let through",
    guarded(async () => {
      const s = server as RuntimeServer;
      const p = proxy as FaultProxy;
      const { shopId, voucherId } = await createSaleOverHttp(s.url, s.driver(), { units: 1, label: `stale-${name}` });
      created.push(voucherId);
      const read = async () => {
        const res = await fetch(`${s.url}/api/shop/${shopId}`, { signal: AbortSignal.timeout(HOLD_MS * 3) });
        const body = (await res.json()) as { data?: { id?: number } };
        return res.status === 200 && body.data?.id === shopId;
      };
      expect(await read()).toBe(true);
      p.set({ kind: "hold", ms: HOLD_MS, match: PROBE });
      try {
        // Fresh reads touch no Redis; the first read past freshness is answered and leaves its probe at the gate.
        await eventually("a read answered while its refresh's probe is held", async () =>
          (await read()) ? p.holding === 1 : false,
        );
        const more = await Promise.all(Array.from({ length: 10 }, read));
        expect(more).toEqual(Array(10).fill(true));
        expect(p.holding).toBe(1);
      } finally {
        p.release();
        p.set({ kind: "pass" });
      }
      await eventually("the refresh let through", async () => p.holding === 0);
      expect(await read()).toBe(true);
    }),
    60_000,
  );
});

/**
 * Runtime matrix: a buyer who disconnects in the middle of a refill (src/services/seckill/reserve.ts,
 * moves.ts). On workerd a request whose client is gone is cancelled: a promise of its I/O never
 * settles and its `finally` never runs, unless the work was handed to `ctx.waitUntil`. A refill so
 * cut off would hold the isolate's refill gate "in flight" for ever, and every later dry buyer of
 * that home shard would wait on it and be told SOLD_OUT while other shards hold stock.
 *
 * Forced with a fault proxy in front of shard 1 holding the move-out script's reply: buyer A is
 * dry, its refill's move-out on shard 1 runs and its reply is held; A's client disconnects; then
 * buyer B, dry too, must still be sold a unit (the refill finishes, or B does its own). Stock 4
 * over 4 shards is [1, 1, 1, 1]; every buyer here is homed on shard 0. Run one runtime with
 * RUNTIMES=workerd.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startFaultProxy, type FaultProxy } from "../../scripts/stack/fault-proxy.ts";
import { luaSources } from "../../src/redis/scripts.ts";
import { homeShard } from "../../src/services/seckill/shards.ts";
import { within } from "../support/child.ts";
import {
  guardedBy,
  type RuntimeServer,
  seedBuyers,
  selectedRuntimes,
  stackAppEnv,
  startRuntime,
  workerBundle,
} from "../support/runtimes.ts";
import { buy, type Buyer, createSaleOverHttp, redisSide } from "../support/sale-checks.ts";
import { retireVouchers } from "../support/seckill.ts";
import { getShardStack } from "../support/shards.ts";
import { eventually, getStack } from "../support/stack.ts";

const SHARDS = 4;
const sha1 = (text: string) => new Bun.CryptoHasher("sha1").update(text).digest("hex");
/** The move-out script as EVALSHA (its SHA-1) or as EVAL (a line of its code, JSON-escaped or not). */
const MOVE_OUT = [sha1(luaSources.seckillMoveOut), "math.ceil(total / 2)"];

let dir = "";
let buyers: Buyer[] = [];
let failed = false;
const created: number[] = [];
let retireWith: RuntimeServer | undefined;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "cityhub-matrix-refill-cancel-"));
  const stack = await getStack();
  const { createDeps } = await import("../../src/deps.ts");
  const { parseEnv } = await import("../../src/env.ts");
  const { createLogger } = await import("../../src/log.ts");
  const seeder = createDeps(parseEnv(stackAppEnv(stack, { LOG_LEVEL: "silent" })), { log: createLogger("silent") });
  const [seeded] = await Promise.all([
    within(30_000, "seeding buyers", seedBuyers(seeder, 40)),
    selectedRuntimes().includes("workerd") ? workerBundle(dir) : undefined,
  ]);
  buyers = seeded.filter((b) => homeShard(b.userId, SHARDS) === 0);
  if (buyers.length < 3) throw new Error(`only ${buyers.length} of 40 seeded buyers are homed on shard 0`);
}, 120_000);

afterAll(async () => {
  if (retireWith) await retireVouchers(retireWith.driver(), created);
  if (failed || process.env.MATRIX_KEEP_DIR) console.error(`runtime matrix (refill cancel): logs kept in ${dir}`);
  else if (dir) rmSync(dir, { recursive: true, force: true });
});

describe.each(selectedRuntimes())("runtime matrix: a buyer disconnects mid-refill on %s", (name) => {
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
    const shards = await getShardStack(SHARDS);
    const urls = shards.env.SECKILL_SHARD_URLS.split(",");
    proxy = startFaultProxy(urls[1] as string);
    urls[1] = proxy.url;
    server = await startRuntime(name, {
      dir,
      env: stackAppEnv(await getStack(), {
        ...shards.env,
        SECKILL_SHARD_URLS: urls.join(","),
        SECKILL_USER_LIMIT: "0",
      }),
    });
    retireWith ??= server;
  }, 90_000);

  afterAll(async () => {
    await server?.stop();
    await proxy?.stop();
  }, 20_000);

  test(
    "the refill of a buyer whose client went away still releases the isolate's refill gate: the next dry buyer of that shard is sold a unit",
    guarded(async () => {
      const s = server as RuntimeServer;
      const p = proxy as FaultProxy;
      const deps = s.driver();
      const { shopId, voucherId } = await within(
        20_000,
        "creating the sale",
        createSaleOverHttp(s.url, deps, { units: 4, label: `refill-cancel-${name}` }),
      );
      created.push(voucherId);
      const [first, a, b] = buyers as [Buyer, Buyer, Buyer];
      expect((await buy(s.url, voucherId, first, { timeoutMs: 15_000 })).kind).toBe("ack");

      // A is dry: its refill's move-out on shard 1 runs, and its reply is held.
      p.set({ kind: "replyDelay", ms: 3_000, match: MOVE_OUT });
      const gone = new AbortController();
      const aAnswer = buy(s.url, voucherId, a, { timeoutMs: 15_000, signal: gone.signal });
      await eventually("A's refill reached shard 1 and its reply is held", async () => p.held >= 1, 10_000);
      gone.abort();
      expect((await aAnswer).kind).toBe("lost");
      p.set({ kind: "pass" });

      // B is dry too, and shards 2 and 3 (and, once its move finishes, shard 1) hold stock.
      const bAnswer = await buy(s.url, voucherId, b, { timeoutMs: 30_000 });
      expect(bAnswer).toMatchObject({ kind: "ack" });
      // Nothing was lost or made up: 4 units, each either in stock somewhere or held by a buyer.
      const side = await redisSide(deps, shopId, voucherId);
      expect(side.stock + side.buyers).toBe(4);
    }),
    60_000,
  );
});

/**
 * Child process of tests/seckill/shards.test.ts (kill -9 during a move): builds the app's deps from
 * the parent's config (APP_ENV_JSON), takes stock out of shard 1 for shard 0 exactly as
 * refillHome's first half does (lua/seckill-move-out.lua: taken and logged), prints "moved-out"
 * and waits — the parent kills it with SIGKILL before the move-in.
 */
import { createDeps } from "../../src/deps.ts";
import type { Config } from "../../src/env.ts";
import { keys } from "../../src/redis/keys.ts";
import { scriptsFor } from "../../src/redis/scripts.ts";
import { loadSeckillConfig } from "../../src/services/seckill/config.ts";
import { shardsOf } from "../../src/services/seckill/shards.ts";

const config = JSON.parse(process.env.APP_ENV_JSON ?? "null") as Config;
const deps = createDeps(config);
const cfg = await loadSeckillConfig(deps, Number(process.env.VOUCHER_ID));
if (!cfg) throw new Error("voucher not found");
const donor = shardsOf(deps, cfg)[1];
if (!donor) throw new Error("voucher has no shard 1");
const buckets = Array.from({ length: cfg.buckets }, (_, i) => keys.seckill.stock(cfg.shopId, cfg.voucherId, i));
const [taken] = await scriptsFor(donor.redis).seckillMoveOut.exec(
  [keys.seckill.meta(cfg.shopId, cfg.voucherId), keys.seckill.movesOut(cfg.shopId, cfg.voucherId), ...buckets],
  [String(cfg.initialStock), `${crypto.randomUUID()}:1`, "0", String(Date.now())],
);
console.log(`moved-out ${taken}`);
// The move-in never comes: wait for the SIGKILL.
await new Promise(() => setInterval(() => {}, 60_000));

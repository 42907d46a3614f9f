/**
 * Stock moving between the shards of a sharded voucher (shards.ts): "when a shard
 * runs dry while others hold stock, buyers homed there must still be able to buy".
 *
 * Decision: stock moves to the buyers, buyers never move. When the home shard answers SOLD_OUT,
 * the attempt asks every other shard at once for half of what it holds (lua/seckill-move-out.lua:
 * taken, the donor's share lowered and the move logged under its id, atomically), credits what it
 * got to the home shard (lua/seckill-move-in.lua: once per move id) and retries there, in the same
 * request. So a buyer is told SOLD_OUT only when every shard was empty when asked, and every
 * per-user invariant stays in the buyer's one home database. Halving keeps moves rare: a shard
 * gives half its stock at a time, so a sale of S units over N shards moves O(N log S) times, each
 * N − 1 + (givers) × 2 commands — a few hundred commands over a sale of thousands of attempts.
 *
 * Crash safety: a process that dies (or whose reply is lost) between a move-out and its move-in
 * leaves the move in the donor's log; reconcile (finishMoves) applies it — the move-in is
 * idempotent by id, so a move applied before the crash is not applied twice — and then checks the
 * shares against MySQL's stock, the source of truth.
 */
import type { Deps } from "../../deps.ts";
import { keys } from "../../redis/keys.ts";
import { scriptsFor } from "../../redis/scripts.ts";
import { allBucketKeys, type SeckillConfig } from "./config.ts";
import { shardCountOf, shardsOf } from "./shards.ts";

/** How long a recipient remembers an applied move id, seconds: far beyond any move left half-done. */
export const MOVES_IN_TTL_SECONDS = 7 * 86_400;
/** A logged move older than this is finished by reconcile, ms (a live move takes one round trip). */
export const MOVE_GRACE_MS = 30_000;

export interface MoveStats {
  /** Refills attempted (a home shard found dry), moves that brought units, units moved, commands sent. */
  refills: number;
  moves: number;
  units: number;
  commands: number;
}

/** A logged move (the donor's moves-out hash value "toShard:units:epochMs"). */
export function parseMove(value: unknown): { to: number; units: number; at: number } {
  const [to = -1, units = 0, at = 0] = String(value).split(":").map(Number);
  return { to, units, at };
}

/**
 * Applies move `id` of `units` on shard `redis` of the voucher (lua/seckill-move-in.lua, once per
 * id): 1 applied now, 0 applied before, -1 the voucher is not loaded there.
 */
export async function applyMove(redis: Deps["redis"], cfg: SeckillConfig, id: string, units: number): Promise<number> {
  const { shopId, voucherId } = cfg;
  return await scriptsFor(redis).seckillMoveIn.exec(
    [
      keys.seckill.meta(shopId, voucherId),
      keys.seckill.movesIn(shopId, voucherId),
      keys.seckill.stock(shopId, voucherId, 0),
    ],
    [id, String(units), String(MOVES_IN_TTL_SECONDS)],
  );
}

/**
 * Moves stock from every other shard into `home` (half of each one's stock); resolves with the
 * units now in `home` by this call (0: every other shard was empty, or unreachable). Never rejects:
 * a donor that failed or whose reply was lost either took nothing or logged its move for
 * reconcile; a move-in that failed stays logged for reconcile too.
 */
export async function refillHome(
  deps: Pick<Deps, "redis" | "seckillShards" | "clock" | "log">,
  cfg: SeckillConfig,
  home: number,
  stats?: MoveStats,
): Promise<number> {
  if (shardCountOf(cfg) <= 1) return 0;
  const shards = shardsOf(deps, cfg);
  const target = shards[home];
  if (!target) return 0;
  if (stats) stats.refills++;
  const { shopId, voucherId } = cfg;
  const base = crypto.randomUUID();
  const now = deps.clock.now();
  const buckets = allBucketKeys(cfg);
  const donors = shards.filter((s) => s.shard !== home);
  const taken = await Promise.all(
    donors.map(async (d) => {
      if (stats) stats.commands++;
      const id = `${base}:${d.shard}`;
      try {
        const [units] = await scriptsFor(d.redis).seckillMoveOut.exec(
          [keys.seckill.meta(shopId, voucherId), keys.seckill.movesOut(shopId, voucherId), ...buckets],
          [String(cfg.initialStock), id, String(home), String(now)],
        );
        return { d, id, units };
      } catch (err) {
        // Taken and logged, or not: either way reconcile knows (the log is the truth).
        deps.log.warn("seckill stock move-out failed or its reply was lost; reconcile finishes a logged move", {
          voucherId,
          from: d.shard,
          to: home,
          err,
        });
        return { d, id, units: 0 };
      }
    }),
  );
  let moved = 0;
  for (const { d, id, units } of taken) {
    if (units <= 0) continue;
    try {
      if (stats) stats.commands += 2;
      const applied = await applyMove(target.redis, cfg, id, units);
      if (applied === -1) continue; // home not loaded: the log keeps it for reconcile's reload
      moved += units;
      if (stats) {
        stats.moves++;
        stats.units += units;
      }
      await d.redis.hdel(keys.seckill.movesOut(shopId, voucherId), id);
    } catch (err) {
      deps.log.warn("seckill stock move-in failed or its reply was lost; reconcile finishes it", {
        voucherId,
        from: d.shard,
        to: home,
        id,
        err,
      });
    }
  }
  return moved;
}

export interface FinishedMoves {
  /** Logged moves applied now (their process died or their reply was lost), units, and entries cleared. */
  applied: number;
  units: number;
  cleared: number;
  /** Moves to a shard that is not loaded (its reload accounts for them). */
  toUnloaded: number;
}

/**
 * Reconcile's half of the moves: every logged move older than MOVE_GRACE_MS is applied to its
 * recipient (once: by id) and cleared from the donor's log. Moves to a recipient that is not
 * loaded are left for the reload, which computes that shard's share from the others'.
 */
export async function finishMoves(
  deps: Pick<Deps, "redis" | "seckillShards" | "clock">,
  cfg: SeckillConfig,
): Promise<FinishedMoves> {
  const out: FinishedMoves = { applied: 0, units: 0, cleared: 0, toUnloaded: 0 };
  if (shardCountOf(cfg) <= 1) return out;
  const shards = shardsOf(deps, cfg);
  const { shopId, voucherId } = cfg;
  const now = deps.clock.now();
  for (const d of shards) {
    const log = (await d.redis.hgetall<Record<string, string>>(keys.seckill.movesOut(shopId, voucherId))) ?? {};
    for (const [id, value] of Object.entries(log)) {
      const { to, units, at } = parseMove(value);
      if (now - at < MOVE_GRACE_MS) continue;
      const target = shards[to];
      if (!target) continue;
      const applied = await applyMove(target.redis, cfg, id, units);
      if (applied === -1) {
        out.toUnloaded++;
        continue;
      }
      if (applied === 1) {
        out.applied++;
        out.units += units;
      }
      await d.redis.hdel(keys.seckill.movesOut(shopId, voucherId), id);
      out.cleared++;
    }
  }
  return out;
}

/** Moves logged by any shard toward `to` (a reload of `to` accounts for them and clears them). */
export async function clearMovesTo(
  deps: Pick<Deps, "redis" | "seckillShards">,
  cfg: SeckillConfig,
  to: number,
): Promise<number> {
  let cleared = 0;
  for (const d of shardsOf(deps, cfg)) {
    const log = (await d.redis.hgetall<Record<string, string>>(keys.seckill.movesOut(cfg.shopId, cfg.voucherId))) ?? {};
    const ids = Object.entries(log)
      .filter(([, v]) => parseMove(v).to === to)
      .map(([id]) => id);
    if (ids.length > 0) cleared += await d.redis.hdel(keys.seckill.movesOut(cfg.shopId, cfg.voucherId), ...ids);
  }
  return cleared;
}

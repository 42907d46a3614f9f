/**
 * Follows. tb_follow (UNIQUE(user_id, follow_user_id)) is the truth; `follows:{uid}` mirrors each
 * user's followees in Redis for SINTER ("followed by both of us").
 *
 * Every write is MySQL first, then Redis, and each step is idempotent (INSERT IGNORE / DELETE,
 * SADD / SREM, ZADD NX / ZREM): if Redis fails after MySQL succeeded, the caller gets an error and
 * simply retries, and the retry converges both stores. Reads of "do I follow X" go to MySQL, so a
 * not-yet-retried Redis step never makes the answer wrong.
 */
import type { Deps } from "../deps.ts";
import { AppError } from "../errors.ts";
import { keys } from "../redis/keys.ts";
import { userCards } from "./blog.ts";
import { backfillAuthor, removeAuthorFromFeed } from "./feed.ts";
import type { SessionUser } from "./session.ts";

export type FollowOutcome = { ok: true } | { ok: false; reason: "SELF" | "NOT_FOUND" };

async function userExists(deps: Deps, id: number): Promise<boolean> {
  return (await deps.db.execute("SELECT 1 FROM tb_user WHERE id = ?", [id])).rows.length > 0;
}

/**
 * Follows (`follow = true`) or unfollows `target`. Following also copies the target's recent
 * notes into the caller's inbox; unfollowing removes all of them from it.
 */
export async function setFollow(deps: Deps, me: number, target: number, follow: boolean): Promise<FollowOutcome> {
  if (me === target) return { ok: false, reason: "SELF" };
  if (follow) {
    if (!(await userExists(deps, target))) return { ok: false, reason: "NOT_FOUND" };
    await deps.db.execute("INSERT IGNORE INTO tb_follow (user_id, follow_user_id) VALUES (?, ?)", [me, target]);
    await propagate(deps, async () => {
      await deps.redis.sadd(keys.follows(me), target);
      await backfillAuthor(deps, me, target);
    });
  } else {
    await deps.db.execute("DELETE FROM tb_follow WHERE user_id = ? AND follow_user_id = ?", [me, target]);
    await propagate(deps, async () => {
      await deps.redis.srem(keys.follows(me), target);
      await removeAuthorFromFeed(deps, me, target);
    });
  }
  return { ok: true };
}

/** Runs the Redis half of a follow change; a failure is a 503 whose retry converges. */
async function propagate(deps: Deps, fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (err) {
    deps.log.error("follow saved in MySQL but not propagated to Redis", { err });
    throw new AppError("UNAVAILABLE", "the change was saved but not fully applied; retry the request", { cause: err });
  }
}

export async function isFollowing(deps: Deps, me: number, target: number): Promise<boolean> {
  return (
    (await deps.db.execute("SELECT 1 FROM tb_follow WHERE user_id = ? AND follow_user_id = ?", [me, target])).rows
      .length > 0
  );
}

/** Users both `me` and `other` follow (SINTER of the two sets), by id. */
export async function commonFollows(deps: Deps, me: number, other: number): Promise<SessionUser[]> {
  const ids = (await deps.redis.sinter(keys.follows(me), keys.follows(other))).map(Number).sort((a, b) => a - b);
  return await userCards(deps, ids);
}

/**
 * Follows. tb_follow (UNIQUE(user_id, follow_user_id)) is the truth; `follows:{uid}` mirrors each
 * user's followees in Redis for SINTER ("followed by both of us").
 *
 * A follow is one round trip after the limiter: the INSERT (which is its own existence check: it
 * selects the target from tb_user) and the SADD run together; the inbox backfill runs in the
 * background. Each step is idempotent (INSERT IGNORE / DELETE, SADD / SREM, ZADD NX / ZREM): if
 * either store fails the caller gets an error and simply retries, and the retry converges both.
 * Reads of "do I follow X" go to MySQL, so a Redis step that ran ahead never makes it wrong.
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
 * notes into the caller's inbox (in the background: until it lands the feed lacks only the notes
 * posted before the follow); unfollowing removes all of them from it.
 */
export async function setFollow(deps: Deps, me: number, target: number, follow: boolean): Promise<FollowOutcome> {
  if (me === target) return { ok: false, reason: "SELF" };
  if (follow) return await addFollow(deps, me, target);
  await deps.db.execute("DELETE FROM tb_follow WHERE user_id = ? AND follow_user_id = ?", [me, target]);
  await propagate(deps, async () => {
    await deps.redis.srem(keys.follows(me), target);
    await removeAuthorFromFeed(deps, me, target);
  });
  return { ok: true };
}

async function addFollow(deps: Deps, me: number, target: number): Promise<FollowOutcome> {
  const [inserted, mirrored] = await Promise.allSettled([
    deps.db.execute("INSERT IGNORE INTO tb_follow (user_id, follow_user_id) SELECT ?, id FROM tb_user WHERE id = ?", [
      me,
      target,
    ]),
    deps.redis.sadd(keys.follows(me), target),
  ]);
  if (inserted.status === "rejected") {
    // If this SADD added the member, the mirror may now hold a follow MySQL lacks: taken back
    // (the client retries the follow). A member that was there before is left alone.
    if (mirrored.status === "fulfilled" && mirrored.value === 1)
      deps.waitUntil(deps.redis.srem(keys.follows(me), target));
    throw inserted.reason;
  }
  // No row: already following (a repeat), or no such user — only then a second trip to tell which.
  if (inserted.value.rowsAffected === 0 && !(await userExists(deps, target))) {
    if (mirrored.status === "fulfilled") await deps.redis.srem(keys.follows(me), target);
    return { ok: false, reason: "NOT_FOUND" };
  }
  if (mirrored.status === "rejected") {
    deps.log.error("follow saved in MySQL but not propagated to Redis", { err: mirrored.reason });
    throw new AppError("UNAVAILABLE", "the change was saved but not fully applied; retry the request", {
      cause: mirrored.reason,
    });
  }
  deps.waitUntil(
    backfillAuthor(deps, me, target).catch((err: unknown) => {
      deps.log.error("follow saved; copying the author's notes into the inbox failed", { err, me, target });
    }),
  );
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

/**
 * The follow feed: push model, as in the classic service. Each user has an inbox `feed:{uid}`
 * (ZSET member = blog id, score = note time in epoch ms). Posting a note pushes its id into every
 * follower's inbox; each inbox keeps only the FEED_MAX_LENGTH newest ids.
 *
 * Reading is scroll paging over scores, newest first: the client passes back `minTime` (the
 * smallest score it has seen, as `lastId`) and `offset` (how many items *with exactly that score*
 * it has already seen). Many notes can share a timestamp (bulk imports, same-millisecond posts);
 * the classic service counted `offset` only within the last page, so when a run of equal scores
 * spanned more than one page it repeated items forever. Here the run is counted across pages.
 */
import type { Deps } from "../deps.ts";
import { keys } from "../redis/keys.ts";
import { readNearest } from "../redis/read.ts";
import { parseSqlUtc } from "../util/time.ts";
import { type Blog, followedBlogsByIds } from "./blog.ts";

/** Followers / note ids handled per MySQL page and Redis pipeline. */
const BATCH = 500;

type Row = Record<string, string | number | null>;

/** Keeps the newest `max` members: ranks 0 .. -(max+1) are the oldest surplus. */
function trimArgs(max: number): [number, number] {
  return [0, -(max + 1)];
}

/**
 * Pushes a new note into the inbox of every follower of `authorId` (followers from MySQL, the
 * truth, paged by primary key so a huge follower list never loads at once).
 */
export async function pushToFollowers(deps: Deps, authorId: number, blogId: number, scoreMs: number): Promise<number> {
  const [from, to] = trimArgs(deps.config.FEED_MAX_LENGTH);
  let after = 0;
  let pushed = 0;
  for (;;) {
    const rows = (
      await deps.db.execute(
        "SELECT id, user_id FROM tb_follow WHERE follow_user_id = ? AND id > ? ORDER BY id LIMIT ?",
        [authorId, after, BATCH],
      )
    ).rows as Row[];
    if (rows.length === 0) break;
    const p = deps.redis.pipeline();
    for (const r of rows) {
      const key = keys.feed(Number(r.user_id));
      p.zadd(key, { score: scoreMs, member: String(blogId) });
      p.zremrangebyrank(key, from, to);
    }
    await p.exec();
    pushed += rows.length;
    after = Number(rows[rows.length - 1]?.id);
    if (rows.length < BATCH) break;
  }
  return pushed;
}

/**
 * After a follow: copies the author's newest notes into the follower's inbox, so the feed shows
 * them at once (the classic service showed only notes posted after the follow). NX keeps the
 * score of ids already there; the scores here are the notes' stored times (second precision).
 */
export async function backfillAuthor(deps: Deps, followerId: number, authorId: number): Promise<void> {
  const max = deps.config.FEED_MAX_LENGTH;
  const rows = (
    await deps.db.execute("SELECT id, create_time FROM tb_blog WHERE user_id = ? ORDER BY id DESC LIMIT ?", [
      authorId,
      max,
    ])
  ).rows as Row[];
  if (rows.length === 0) return;
  const key = keys.feed(followerId);
  const members = rows.map((r) => ({ score: parseSqlUtc(String(r.create_time)), member: String(r.id) }));
  const [first, ...rest] = members;
  if (!first) return;
  const p = deps.redis.pipeline();
  p.zadd(key, { nx: true }, first, ...rest);
  p.zremrangebyrank(key, ...trimArgs(max));
  await p.exec();
}

/** After an unfollow: removes every note of the author from the follower's inbox. */
export async function removeAuthorFromFeed(deps: Deps, followerId: number, authorId: number): Promise<void> {
  const key = keys.feed(followerId);
  let after = 0;
  for (;;) {
    const rows = (
      await deps.db.execute("SELECT id FROM tb_blog WHERE user_id = ? AND id > ? ORDER BY id LIMIT ?", [
        authorId,
        after,
        BATCH,
      ])
    ).rows as Row[];
    if (rows.length === 0) break;
    await deps.redis.zrem(key, ...rows.map((r) => String(r.id)));
    after = Number(rows[rows.length - 1]?.id);
    if (rows.length < BATCH) break;
  }
}

/** Scroll cursor: the smallest score seen and how many items with exactly that score were seen. */
export interface FeedCursor {
  minTime: number;
  offset: number;
}

/**
 * The cursor after reading `scores` (descending, as returned) from position `cursor.offset`
 * among the items scored `<= cursor.minTime`.
 *
 * If every item read has the cursor's own score, the run of equal scores continues from the
 * previous page: the new offset adds to the old one (the classic bug dropped that sum). Otherwise
 * the new offset counts the trailing items equal to the new, smaller minimum.
 */
export function advanceCursor(cursor: FeedCursor, scores: number[]): FeedCursor {
  const last = scores[scores.length - 1];
  if (last === undefined) return cursor;
  let trailing = 0;
  for (let i = scores.length - 1; i >= 0 && scores[i] === last; i--) trailing++;
  return last === cursor.minTime
    ? { minTime: last, offset: cursor.offset + trailing }
    : { minTime: last, offset: trailing };
}

export interface FeedPage extends FeedCursor {
  list: Blog[];
}

/** Rounds of inbox reads per page when some ids are dropped (deleted notes, unfollowed authors). */
const MAX_ROUNDS = 4;

/**
 * One scroll page of `userId`'s inbox, newest first, starting below `cursor`. Ids whose note is
 * gone or whose author the user no longer follows are skipped (not removed: removing members
 * while a client pages would shift its offset), and the page is refilled from further down.
 */
export async function readFeedPage(
  deps: Deps,
  userId: number,
  cursor: FeedCursor,
  pageSize: number,
): Promise<FeedPage> {
  const key = keys.feed(userId);
  const list: Blog[] = [];
  let at = cursor;
  for (let round = 0; round < MAX_ROUNDS && list.length < pageSize; round++) {
    const need = pageSize - list.length;
    const from = at;
    const raw = await readNearest(deps, (r) =>
      r.zrange<(string | number)[]>(key, from.minTime, 0, {
        byScore: true,
        rev: true,
        withScores: true,
        offset: from.offset,
        count: need,
      }),
    );
    const ids: number[] = [];
    const scores: number[] = [];
    for (let i = 0; i + 1 < raw.length; i += 2) {
      ids.push(Number(raw[i]));
      scores.push(Number(raw[i + 1]));
    }
    if (ids.length === 0) break;
    at = advanceCursor(at, scores);
    list.push(...(await followedBlogsByIds(deps, ids, userId)));
    if (ids.length < need) break;
  }
  return { list, minTime: at.minTime, offset: at.offset };
}

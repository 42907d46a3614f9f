/**
 * Notes ("blogs") and likes.
 *
 * Likes live in Redis (`blog:liked:{id}`, ZSET user → like time), which answers "did I like it"
 * and "who liked it first"; tb_blog.liked mirrors the set's size for ranking the hot list in SQL.
 *
 * Keeping the two consistent: a toggle is one Lua step that flips membership and hands out a
 * version (lua/blog-like-toggle.lua); MySQL then takes `liked = count` only if its stored
 * `liked_version` is older. So
 * - concurrent toggles, even by the same user, never double count: Redis serialises them, and
 *   whichever MySQL write lands last with the newest version wins, in any arrival order;
 * - the MySQL write runs after the answer (in the background); one that fails, or is lost with the
 *   isolate, leaves the column behind only until the next successful write for that note: a
 *   failure is retried once (`syncLikedCount`), and any later toggle by anyone writes the
 *   then-current count. The toggle itself still answers
 *   success, because it did happen (Redis is the record of who liked what); answering an error
 *   would make the client toggle again, i.e. undo it.
 * We chose absolute, versioned writes over `liked = liked + delta`: deltas are order-free but a
 * lost delta can never be repaired from Redis without racing concurrent deltas.
 */
import type { Deps } from "../deps.ts";
import { keys } from "../redis/keys.ts";
import { readNearest } from "../redis/read.ts";
import { scriptsFor } from "../redis/scripts.ts";
import { formatInZone, parseSqlUtc, toSqlUtc } from "../util/time.ts";
import type { SessionUser } from "./session.ts";

/** The classic hmdp note shape, with the author's `name`/`icon` and the caller's `isLike`. */
export interface Blog {
  id: number;
  shopId: number;
  userId: number;
  title: string;
  /** Comma-separated image paths, at most 9. */
  images: string;
  content: string;
  liked: number;
  comments: number;
  createTime: string;
  updateTime: string;
  name: string;
  icon: string;
  isLike: boolean;
}

export interface BlogInput {
  shopId: number;
  title: string;
  images: string;
  content: string;
}

type Row = Record<string, string | number | null>;

/** Notes per page of the hot list and of a user's notes (api.md "Paging"). */
export const BLOG_PAGE_SIZE = 10;
/** How many likers GET /api/blog/likes/{id} shows. */
export const LIKERS_SHOWN = 5;

const BLOG_SELECT = `SELECT b.id, b.shop_id, b.user_id, b.title, b.images, b.content, b.liked, b.comments, b.create_time, b.update_time,
       u.nick_name, u.icon
  FROM tb_blog b LEFT JOIN tb_user u ON u.id = b.user_id`;

function mapBlog(r: Row, zone: string): Blog {
  return {
    id: Number(r.id),
    shopId: Number(r.shop_id),
    userId: Number(r.user_id),
    title: String(r.title),
    images: String(r.images ?? ""),
    content: String(r.content),
    liked: Number(r.liked),
    comments: Number(r.comments),
    createTime: formatInZone(parseSqlUtc(String(r.create_time)), zone),
    updateTime: formatInZone(parseSqlUtc(String(r.update_time)), zone),
    name: String(r.nick_name ?? ""),
    icon: String(r.icon ?? ""),
    isLike: false,
  };
}

/**
 * Which of `ids` `viewerId` has liked (one explicit pipeline for the whole list: one request on
 * every runtime, also on workerd where auto-pipelining is off and ten parallel commands would queue
 * behind its six connections per request). Anonymous viewers get an empty set without touching
 * Redis; a Redis failure degrades to "none" too — the classic hot list failed for anonymous
 * callers, personalisation must never break a list.
 */
async function likedBy(deps: Deps, ids: number[], viewerId: number | null): Promise<Set<number>> {
  const liked = new Set<number>();
  if (viewerId === null || ids.length === 0) return liked;
  try {
    const scores = (await readNearest(deps, (r) => {
      const p = r.pipeline();
      for (const id of ids) p.zscore(keys.blogLiked(id), viewerId);
      return p.exec();
    })) as (number | null)[];
    ids.forEach((id, i) => {
      if (scores[i] !== null && scores[i] !== undefined) liked.add(id);
    });
  } catch (err) {
    deps.log.warn("isLike lookup failed; answering false", { err });
  }
  return liked;
}

function mapWithLikes(deps: Deps, rows: Row[], liked: Set<number>): Blog[] {
  return rows.map((r) => {
    const b = mapBlog(r, deps.config.SERVICE_TIME_ZONE);
    b.isLike = liked.has(b.id);
    return b;
  });
}

/** Notes of a query whose ids are known only from its rows: the likes lookup follows it. */
async function query(deps: Deps, sql: string, args: unknown[], viewerId: number | null): Promise<Blog[]> {
  const rows = (await deps.db.execute(sql, args)).rows as Row[];
  return mapWithLikes(
    deps,
    rows,
    await likedBy(
      deps,
      rows.map((r) => Number(r.id)),
      viewerId,
    ),
  );
}

/**
 * Notes of a query among `ids` known in advance: the likes lookup runs beside the query (one
 * round trip for both), at the cost of asking for ids the query may then drop.
 */
async function queryByIds(
  deps: Deps,
  sql: string,
  args: unknown[],
  ids: number[],
  viewerId: number | null,
): Promise<Blog[]> {
  const [res, liked] = await Promise.all([deps.db.execute(sql, args), likedBy(deps, ids, viewerId)]);
  return mapWithLikes(deps, res.rows as Row[], liked);
}

/**
 * Stores a note (MySQL only; publishing it to followers' feeds is services/notes.ts publishNote's
 * next step). `at`: its creation time, epoch ms (the feed score). One statement: the INSERT selects
 * the shop, so an unknown shop inserts nothing (its own existence check).
 */
export async function insertBlog(
  deps: Deps,
  authorId: number,
  input: BlogInput,
): Promise<{ ok: true; id: number; at: number } | { ok: false; reason: "UNKNOWN_SHOP" }> {
  const now = deps.clock.now();
  const at = toSqlUtc(now);
  const res = await deps.db.execute(
    `INSERT INTO tb_blog (shop_id, user_id, title, images, content, create_time, update_time)
     SELECT id, ?, ?, ?, ?, ?, ? FROM tb_shop WHERE id = ?`,
    [authorId, input.title, input.images, input.content, at, at, input.shopId],
  );
  if (res.rowsAffected === 0) return { ok: false, reason: "UNKNOWN_SHOP" };
  return { ok: true, id: Number(res.insertId), at: now };
}

export async function getBlog(deps: Deps, id: number, viewerId: number | null): Promise<Blog | null> {
  return (await queryByIds(deps, `${BLOG_SELECT} WHERE b.id = ?`, [id], [id], viewerId))[0] ?? null;
}

/** Most liked first; ties newest first, so pages are stable. */
export async function hotBlogs(deps: Deps, page: number, viewerId: number | null): Promise<Blog[]> {
  return await query(
    deps,
    `${BLOG_SELECT} ORDER BY b.liked DESC, b.id DESC LIMIT ? OFFSET ?`,
    [BLOG_PAGE_SIZE, (page - 1) * BLOG_PAGE_SIZE],
    viewerId,
  );
}

/** A user's notes, newest first. */
export async function blogsOfUser(
  deps: Deps,
  authorId: number,
  page: number,
  viewerId: number | null,
): Promise<Blog[]> {
  return await query(
    deps,
    `${BLOG_SELECT} WHERE b.user_id = ? ORDER BY b.id DESC LIMIT ? OFFSET ?`,
    [authorId, BLOG_PAGE_SIZE, (page - 1) * BLOG_PAGE_SIZE],
    viewerId,
  );
}

/**
 * Notes by id, in the order of `ids`, keeping only those whose author `followerId` follows in
 * MySQL (the truth): an inbox may briefly hold a note of an author just unfollowed (a push racing
 * the unfollow), and such a note must not show.
 */
export async function followedBlogsByIds(deps: Deps, ids: number[], followerId: number): Promise<Blog[]> {
  if (ids.length === 0) return [];
  const rows = await queryByIds(
    deps,
    `${BLOG_SELECT} JOIN tb_follow f ON f.follow_user_id = b.user_id AND f.user_id = ? WHERE b.id IN (${ids.map(() => "?").join(", ")})`,
    [followerId, ...ids],
    ids,
    followerId,
  );
  const byId = new Map(rows.map((b) => [b.id, b]));
  return ids.flatMap((id) => byId.get(id) ?? []);
}

/** Public cards of users, in the order of `ids` (unknown ids are skipped). */
export async function userCards(deps: Deps, ids: number[]): Promise<SessionUser[]> {
  if (ids.length === 0) return [];
  const rows = (
    await deps.db.execute(`SELECT id, nick_name, icon FROM tb_user WHERE id IN (${ids.map(() => "?").join(", ")})`, ids)
  ).rows as Row[];
  const byId = new Map(
    rows.map((r) => [Number(r.id), { id: Number(r.id), nickName: String(r.nick_name), icon: String(r.icon ?? "") }]),
  );
  return ids.flatMap((id) => byId.get(id) ?? []);
}

/**
 * Writes a like count to MySQL unless MySQL already holds a newer one. `update_time` is assigned
 * to itself so a like does not count as an edit of the note (the column auto-updates otherwise).
 */
async function writeLikedCount(deps: Deps, blogId: number, count: number, version: number): Promise<void> {
  await deps.db.execute(
    "UPDATE tb_blog SET liked = ?, liked_version = ?, update_time = update_time WHERE id = ? AND liked_version < ?",
    [count, version, blogId, version],
  );
}

/**
 * Copies the current (count, version) of a note's like set to MySQL. Both are read in one
 * MULTI, so they belong together; the version guard makes this safe to run at any time.
 */
export async function syncLikedCount(deps: Deps, blogId: number): Promise<void> {
  const [count, version] = await deps.redis
    .multi()
    .zcard(keys.blogLiked(blogId))
    .get<number | string>(keys.blogLikedVersion(blogId))
    .exec();
  if (version === null || version === undefined) return;
  await writeLikedCount(deps, blogId, Number(count), Number(version));
}

export type LikeOutcome = { ok: true; liked: boolean; count: number } | { ok: false; reason: "NOT_FOUND" };

/**
 * Likes the note if the user has not, unlikes it otherwise (see the header for consistency). One
 * round trip: the note's existence check runs beside the toggle, and the column write runs in the
 * background (it is derived: the toggle is the record, the next write of the note's count repairs
 * a lost one). A toggle that turns out to have been for a missing note is taken back (its keys are
 * dropped: no note has them); one whose check failed is undone, so an error means nothing changed.
 */
export async function toggleLike(deps: Deps, blogId: number, userId: number): Promise<LikeOutcome> {
  const likeKeys = [keys.blogLiked(blogId), keys.blogLikedVersion(blogId)];
  const toggle = () => scriptsFor(deps.redis).blogLikeToggle.exec(likeKeys, [String(userId), String(deps.clock.now())]);
  const [found, toggled] = await Promise.allSettled([
    deps.db.execute("SELECT 1 FROM tb_blog WHERE id = ?", [blogId]),
    toggle(),
  ]);
  if (toggled.status === "rejected") throw toggled.reason;
  if (found.status === "rejected") {
    await toggle();
    throw found.reason;
  }
  if (found.value.rows.length === 0) {
    await deps.redis.del(...likeKeys);
    return { ok: false, reason: "NOT_FOUND" };
  }
  const [delta, count, version] = toggled.value;
  deps.waitUntil(
    writeLikedCount(deps, blogId, Number(count), Number(version)).catch((err: unknown) => {
      deps.log.error("liked count write failed; retrying in the background", { err, blogId });
      return syncLikedCount(deps, blogId);
    }),
  );
  return { ok: true, liked: Number(delta) > 0, count: Number(count) };
}

/** The first likers in like order (ZSET score = like time), as public user cards. */
export async function firstLikers(deps: Deps, blogId: number, n = LIKERS_SHOWN): Promise<SessionUser[]> {
  const ids = (await readNearest(deps, (r) => r.zrange<(string | number)[]>(keys.blogLiked(blogId), 0, n - 1))).map(
    Number,
  );
  return await userCards(deps, ids);
}

/**
 * Publishing a note, as one service step: store it (blog.ts), then push it into every follower's
 * inbox (feed.ts). Here rather than in either, so neither imports the other (the feed reads notes
 * through blog.ts).
 */
import type { Deps } from "../deps.ts";
import { type BlogInput, insertBlog } from "./blog.ts";
import { pushToFollowers } from "./feed.ts";

/**
 * Stores the note, answers, and pushes it into the followers' inboxes in the background (pages of
 * followers, one at a time: memory bounded by a page however many there are). The note is saved
 * (MySQL is the truth) and shows on the author's page at once; a follower's feed shows it when the
 * push reaches their inbox. A push that fails or dies with the isolate is logged and not retried:
 * only those inbox copies are missing, and failing the request would make the client post twice.
 */
export async function publishNote(
  deps: Deps,
  authorId: number,
  input: BlogInput,
): Promise<{ ok: true; id: number } | { ok: false; reason: "UNKNOWN_SHOP" }> {
  const stored = await insertBlog(deps, authorId, input);
  if (!stored.ok) return stored;
  deps.waitUntil(
    pushToFollowers(deps, authorId, stored.id, stored.at).catch((err: unknown) => {
      deps.log.error("feed push failed", { err, blogId: stored.id, authorId });
    }),
  );
  return { ok: true, id: stored.id };
}

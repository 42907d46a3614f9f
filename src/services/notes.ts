/**
 * Publishing a note, as one service step: store it (blog.ts), then push it into every follower's
 * inbox (feed.ts). Here rather than in either, so neither imports the other (the feed reads notes
 * through blog.ts).
 */
import type { Deps } from "../deps.ts";
import { type BlogInput, insertBlog } from "./blog.ts";
import { pushToFollowers } from "./feed.ts";

export async function publishNote(
  deps: Deps,
  authorId: number,
  input: BlogInput,
): Promise<{ ok: true; id: number } | { ok: false; reason: "UNKNOWN_SHOP" }> {
  const stored = await insertBlog(deps, authorId, input);
  if (!stored.ok) return stored;
  try {
    await pushToFollowers(deps, authorId, stored.id, stored.at);
  } catch (err) {
    // The note is saved (MySQL is the truth) and shows on the author's page; only the inbox copy
    // for some followers is missing. Failing the request would make the client post it twice.
    deps.log.error("feed push failed", { err, blogId: stored.id, authorId });
  }
  return { ok: true, id: stored.id };
}

import { Hono } from "hono";
import { z } from "zod";
import { AppError, fail, ok } from "../errors.ts";
import { type MaybeUserEnv, optionalUser, requireUser, type UserEnv } from "../http/auth.ts";
import { BODY_LIMITS, jsonBody } from "../http/body.ts";
import { idempotentUser } from "../http/idempotency.ts";
import { nonCore } from "../http/degrade.ts";
import { Current, Id, IdParam, JsonId, queryInt, varchar } from "../http/validate.ts";
import { doc, LISTING_LIMIT_NOTE, NON_CORE_NOTE, v } from "../openapi/describe.ts";
import { Blog, FeedPage, NumericId, UserCard } from "../openapi/schemas.ts";
import { blogsOfUser, firstLikers, getBlog, hotBlogs, toggleLike } from "../services/blog.ts";
import { readFeedPage } from "../services/feed.ts";
import { takeWriteToken } from "../services/upload-limits.ts";
import type { AppEnv } from "../types.ts";
import { publishNote } from "../services/notes.ts";

/**
 * One image reference: a path on this site (`/imgs/blogs/…`, what uploads return). No other
 * hosts, not even protocol-relative `//host/…`: an outside image would let its host see who reads the note.
 */
const ImageRef = z.string().regex(/^\/(?!\/)(?!.*\.\.)[A-Za-z0-9/._-]{1,254}$/, "images must be paths on this site");
/** Comma-separated, at most 9 (tb_blog.images). */
const Images = varchar(2048)
  .default("")
  .transform((s) =>
    s
      .split(",")
      .map((x) => x.trim())
      .filter(Boolean),
  )
  .pipe(z.array(ImageRef).max(9, "at most 9 images"))
  .transform((list) => list.join(","));

const BlogBody = z.object({
  shopId: JsonId,
  title: varchar(255).trim().min(1),
  content: varchar(2048).trim().min(1),
  images: Images,
});

/** Scroll cursor: `lastId` is the smallest score already seen (epoch ms; absent = from the newest). */
const FeedQuery = z.object({
  lastId: queryInt(0, Number.MAX_SAFE_INTEGER).default(Number.MAX_SAFE_INTEGER),
  offset: queryInt(0, 100_000).default(0),
});

const publicRoutes = new Hono<MaybeUserEnv>().get(
  "/hot",
  optionalUser,
  doc(
    {
      tag: "notes",
      summary: "Notes by likes, 10 a page; `isLike` for the caller when signed in",
      description: LISTING_LIMIT_NOTE,
      access: "optional-user",
      data: z.array(Blog),
      errors: ["RATE_LIMITED"],
    },
    v("query", z.object({ current: Current })),
  ),
  async (c) => {
    const viewer = c.get("user");
    return c.json(ok(await hotBlogs(c.get("deps"), c.req.valid("query").current, viewer ? viewer.id : null)));
  },
);

const authed = new Hono<UserEnv>()
  .use(requireUser)
  .post(
    "/",
    jsonBody(BODY_LIMITS.note),
    doc(
      {
        tag: "notes",
        summary: "Publish a note; its id is pushed to every follower's feed",
        description: "Per user: a token bucket (NOTE_BUCKET_*); an empty bucket is a 429 with Retry-After.",
        access: "user",
        data: NumericId,
        outcomes: ["NOT_FOUND"],
        errors: ["INVALID_INPUT", "RATE_LIMITED"],
      },
      v("json", BlogBody),
    ),
    idempotentUser(BODY_LIMITS.note),
    async (c) => {
      const limited = await takeWriteToken(c.get("deps"), "note", c.get("user").id);
      if (limited)
        throw new AppError("RATE_LIMITED", limited.message, { retryAfterSeconds: limited.retryAfterMs / 1000 });
      const res = await publishNote(c.get("deps"), c.get("user").id, c.req.valid("json"));
      // An unknown shop is a business outcome (api.md "Status codes"), not malformed input.
      return res.ok ? c.json(ok(res.id)) : c.json(fail("NOT_FOUND", "shop not found"));
    },
  )
  .put(
    "/like/:id",
    nonCore("likes"),
    jsonBody(BODY_LIMITS.none),
    doc(
      {
        tag: "notes",
        summary: "Like or unlike a note (toggle)",
        description: `${NON_CORE_NOTE} Per user: a token bucket shared with follows (TOGGLE_BUCKET_*); empty: 429 with Retry-After.`,
        access: "user",
        outcomes: ["NOT_FOUND"],
        errors: ["UNAVAILABLE", "RATE_LIMITED"],
      },
      v("param", IdParam),
    ),
    idempotentUser(BODY_LIMITS.none),
    async (c) => {
      const limited = await takeWriteToken(c.get("deps"), "toggle", c.get("user").id);
      if (limited)
        throw new AppError("RATE_LIMITED", limited.message, { retryAfterSeconds: limited.retryAfterMs / 1000 });
      const res = await toggleLike(c.get("deps"), c.req.valid("param").id, c.get("user").id);
      return c.json(res.ok ? ok() : fail("NOT_FOUND", "blog not found"));
    },
  )
  .get(
    "/likes/:id",
    nonCore("likes"),
    doc(
      {
        tag: "notes",
        summary: "The first 5 users who liked a note, in like order",
        description: NON_CORE_NOTE,
        access: "user",
        data: z.array(UserCard),
        errors: ["UNAVAILABLE"],
      },
      v("param", IdParam),
    ),
    async (c) => c.json(ok(await firstLikers(c.get("deps"), c.req.valid("param").id))),
  )
  .get(
    "/of/me",
    doc(
      { tag: "notes", summary: "The caller's notes, newest first, 10 a page", access: "user", data: z.array(Blog) },
      v("query", z.object({ current: Current })),
    ),
    async (c) => {
      const me = c.get("user").id;
      return c.json(ok(await blogsOfUser(c.get("deps"), me, c.req.valid("query").current, me)));
    },
  )
  .get(
    "/of/user",
    doc(
      { tag: "notes", summary: "A user's notes, newest first, 10 a page", access: "user", data: z.array(Blog) },
      v("query", z.object({ id: Id, current: Current })),
    ),
    async (c) => {
      const { id, current } = c.req.valid("query");
      return c.json(ok(await blogsOfUser(c.get("deps"), id, current, c.get("user").id)));
    },
  )
  .get(
    "/of/follow",
    nonCore("the feed"),
    doc(
      {
        tag: "notes",
        summary: "Feed of followed users' notes, scroll paging: pass back `minTime` as `lastId` and `offset`",
        description: NON_CORE_NOTE,
        access: "user",
        data: FeedPage,
        errors: ["UNAVAILABLE"],
      },
      v("query", FeedQuery),
    ),
    async (c) => {
      const deps = c.get("deps");
      const { lastId, offset } = c.req.valid("query");
      return c.json(
        ok(await readFeedPage(deps, c.get("user").id, { minTime: lastId, offset }, deps.config.FEED_PAGE_SIZE)),
      );
    },
  )
  .get(
    "/:id",
    doc(
      {
        tag: "notes",
        summary: "A note, with its author and `isLike` for the caller",
        access: "user",
        data: Blog,
        outcomes: ["NOT_FOUND"],
      },
      v("param", IdParam),
    ),
    async (c) => {
      const found = await getBlog(c.get("deps"), c.req.valid("param").id, c.get("user").id);
      return c.json(found ? ok(found) : fail("NOT_FOUND", "blog not found"));
    },
  );

/** Mounted at /api/blog. `/hot` is public (registered first, so the auth guard never runs for it). */
export const blog = new Hono<AppEnv>().route("/", publicRoutes).route("/", authed);

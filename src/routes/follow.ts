import { Hono } from "hono";
import { z } from "zod";
import { AppError, fail, ok } from "../errors.ts";
import { requireUser, type UserEnv } from "../http/auth.ts";
import { BODY_LIMITS, jsonBody } from "../http/body.ts";
import { idempotentUser } from "../http/idempotency.ts";
import { Id, IdParam } from "../http/validate.ts";
import { doc, v } from "../openapi/describe.ts";
import { UserCard } from "../openapi/schemas.ts";
import { commonFollows, isFollowing, setFollow } from "../services/follow.ts";
import { takeWriteToken } from "../services/upload-limits.ts";

/** Mounted at /api/follow. */
export const follow = new Hono<UserEnv>()
  .use(requireUser)
  .put(
    "/:id/:isFollow",
    jsonBody(BODY_LIMITS.none),
    doc(
      {
        tag: "follows",
        summary: "Follow (`true`) or unfollow (`false`) a user",
        description: "Per user: a token bucket shared with likes (TOGGLE_BUCKET_*); empty: 429 with Retry-After.",
        access: "user",
        outcomes: ["INVALID_INPUT", "NOT_FOUND"],
        errors: ["RATE_LIMITED"],
      },
      v("param", z.object({ id: Id, isFollow: z.enum(["true", "false"]) })),
    ),
    idempotentUser(BODY_LIMITS.none),
    async (c) => {
      const { id, isFollow } = c.req.valid("param");
      const limited = await takeWriteToken(c.get("deps"), "toggle", c.get("user").id);
      if (limited)
        throw new AppError("RATE_LIMITED", limited.message, { retryAfterSeconds: limited.retryAfterMs / 1000 });
      const res = await setFollow(c.get("deps"), c.get("user").id, id, isFollow === "true");
      if (res.ok) return c.json(ok());
      // Business outcomes: 200 with success:false (api.md "Status codes").
      return c.json(
        res.reason === "SELF"
          ? fail("INVALID_INPUT", "you cannot follow yourself")
          : fail("NOT_FOUND", "user not found"),
      );
    },
  )
  .get(
    "/or/not/:id",
    doc(
      { tag: "follows", summary: "Whether the caller follows a user", access: "user", data: z.boolean() },
      v("param", IdParam),
    ),
    async (c) => c.json(ok(await isFollowing(c.get("deps"), c.get("user").id, c.req.valid("param").id))),
  )
  .get(
    "/common/:id",
    doc(
      {
        tag: "follows",
        summary: "Users both the caller and this user follow",
        access: "user",
        data: z.array(UserCard),
      },
      v("param", IdParam),
    ),
    async (c) => c.json(ok(await commonFollows(c.get("deps"), c.get("user").id, c.req.valid("param").id))),
  );

import { Hono } from "hono";
import { ok } from "../errors.ts";
import { requireUser, type UserEnv } from "../http/auth.ts";
import { BODY_LIMITS, jsonBody } from "../http/body.ts";
import { idempotentUser } from "../http/idempotency.ts";
import { nonCore } from "../http/degrade.ts";
import { signStreak, signToday } from "../services/sign.ts";
import { z } from "zod";
import { doc, NON_CORE_NOTE } from "../openapi/describe.ts";

/**
 * Mounted at /api/user *before* the user routes, so `/sign/count` is not taken for `/{id}`. The
 * guard is per route: a `use` here would also guard the public /api/user/code and /login.
 */
export const sign = new Hono<UserEnv>()
  .post(
    "/sign",
    requireUser,
    nonCore("sign-in"),
    jsonBody(BODY_LIMITS.none),
    idempotentUser(BODY_LIMITS.none),
    doc(
      {
        tag: "user",
        summary: "Sign in today (daily check-in)",
        description: NON_CORE_NOTE,
        access: "user",
        errors: ["UNAVAILABLE"],
      },
      async (c) => {
        await signToday(c.get("deps"), c.get("user").id);
        return c.json(ok());
      },
    ),
  )
  .get(
    "/sign/count",
    requireUser,
    nonCore("sign-in"),
    doc(
      {
        tag: "user",
        summary: "Consecutive days signed in, up to today",
        description: NON_CORE_NOTE,
        access: "user",
        data: z.number().int(),
        errors: ["UNAVAILABLE"],
      },
      async (c) => c.json(ok(await signStreak(c.get("deps"), c.get("user").id))),
    ),
  );

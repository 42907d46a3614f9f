import { Hono } from "hono";
import { z } from "zod";
import { AppError, fail, ok } from "../errors.ts";
import { publicBodyGate } from "../http/address-window.ts";
import { BODY_LIMITS, jsonBody } from "../http/body.ts";
import { limitAddress } from "../http/client-ip.ts";
import { requireUser, type UserEnv } from "../http/auth.ts";
import { IdParam } from "../http/validate.ts";
import { doc, type RouteDoc, v } from "../openapi/describe.ts";
import { UserCard } from "../openapi/schemas.ts";
import { CODE_RE, loginWithCode, logout, PHONE_RE, sendLoginCode } from "../services/auth.ts";
import { getUserProfile } from "../services/users.ts";
import type { AppEnv } from "../types.ts";

const Phone = z.string().trim().regex(PHONE_RE, "not a mainland mobile number");
const LoginBody = z.object({ phone: Phone, code: z.string().trim().regex(CODE_RE, "the code has 6 digits") });

const SEND_CODE: RouteDoc = {
  tag: "user",
  summary: "Send a 6-digit login code to a mainland mobile number (valid 2 minutes)",
  description: "Limited per phone (one per interval, at most five an hour) and per client address.",
  access: "public",
  errors: ["RATE_LIMITED", "UNAVAILABLE"],
};
const LOGIN: RouteDoc = {
  tag: "user",
  summary: "Log in with the code; an unknown phone registers. `data` is the session token",
  description: "A wrong or expired code is `BAD_CODE`; each code takes a bounded number of attempts.",
  access: "public",
  data: z.string().describe("the session token, sent back in `authorization`"),
  outcomes: ["BAD_CODE"],
};

const authed = new Hono<UserEnv>()
  .use(requireUser)
  .post(
    "/logout",
    jsonBody(BODY_LIMITS.none),
    doc(
      { tag: "user", summary: "End the session (honoured by every isolate within SESSION_TRUST_MS)", access: "user" },
      async (c) => {
        await logout(c.get("deps"), c.get("token"));
        return c.json(ok());
      },
    ),
  )
  .get(
    "/me",
    doc({ tag: "user", summary: "The signed-in user", access: "user", data: UserCard }, (c) =>
      c.json(ok(c.get("user"))),
    ),
  )
  .get(
    "/info/:id",
    doc(
      {
        tag: "user",
        summary: 'A user\'s profile; `{"success":true}` without `data` when there is none',
        access: "user",
        data: { type: "object", description: "city, introduce, fans, followee, gender, birthday, credits, level" },
      },
      v("param", IdParam),
    ),
    async (c) => {
      const profile = await getUserProfile(c.get("deps"), c.req.valid("param").id);
      return c.json(profile ? ok(profile) : ok());
    },
  )
  .get(
    "/:id",
    doc(
      { tag: "user", summary: "A user's card", access: "user", data: UserCard, outcomes: ["NOT_FOUND"] },
      v("param", IdParam),
    ),
    async (c) => {
      const deps = c.get("deps");
      const user = await deps.isolate.caches.userCard.get(deps, c.req.valid("param").id);
      return c.json(user ? ok(user) : fail("NOT_FOUND", "user not found"));
    },
  );

export const user = new Hono<AppEnv>()
  .post(
    "/code",
    publicBodyGate,
    jsonBody(BODY_LIMITS.none),
    doc(SEND_CODE, v("query", z.object({ phone: Phone }))),
    async (c) => {
      const deps = c.get("deps");
      const res = await sendLoginCode(deps, c.req.valid("query").phone, limitAddress(c, deps.config));
      if (res.ok) return c.json(ok());
      if (res.reason === "RATE_LIMITED")
        throw new AppError("RATE_LIMITED", res.message, { retryAfterSeconds: res.retryAfterSeconds });
      throw new AppError("UNAVAILABLE", res.message);
    },
  )
  .post("/login", publicBodyGate, jsonBody(BODY_LIMITS.login), doc(LOGIN, v("json", LoginBody)), async (c) => {
    const { phone, code } = c.req.valid("json");
    const res = await loginWithCode(c.get("deps"), phone, code);
    return c.json(res.ok ? ok(res.token) : fail("BAD_CODE", res.message));
  })
  .route("/", authed);

import { Hono } from "hono";
import { z } from "zod";
import { AppError, fail, ok } from "../errors.ts";
import { BODY_LIMITS, jsonBody } from "../http/body.ts";
import { clientIp } from "../http/client-ip.ts";
import { requireUser, type UserEnv } from "../http/auth.ts";
import { IdParam, v } from "../http/validate.ts";
import { CODE_RE, loginWithCode, logout, PHONE_RE, sendLoginCode } from "../services/auth.ts";
import { getUserProfile } from "../services/users.ts";
import { cachesFor } from "../cache/modules.ts";
import type { AppEnv } from "../types.ts";

const Phone = z.string().trim().regex(PHONE_RE, "not a mainland mobile number");
const LoginBody = z.object({ phone: Phone, code: z.string().trim().regex(CODE_RE, "the code has 6 digits") });

const authed = new Hono<UserEnv>()
  .use(requireUser)
  .post("/logout", async (c) => {
    await logout(c.get("deps"), c.get("token"));
    return c.json(ok());
  })
  .get("/me", (c) => c.json(ok(c.get("user"))))
  .get("/info/:id", v("param", IdParam), async (c) => {
    const profile = await getUserProfile(c.get("deps"), c.req.valid("param").id);
    return c.json(profile ? ok(profile) : ok());
  })
  .get("/:id", v("param", IdParam), async (c) => {
    const deps = c.get("deps");
    const user = await cachesFor(deps).userCard.get(deps, c.req.valid("param").id);
    return c.json(user ? ok(user) : fail("NOT_FOUND", "user not found"));
  });

export const user = new Hono<AppEnv>()
  .post("/code", jsonBody(BODY_LIMITS.none), v("query", z.object({ phone: Phone })), async (c) => {
    const deps = c.get("deps");
    const res = await sendLoginCode(deps, c.req.valid("query").phone, clientIp(c, deps.config.TRUST_PROXY));
    if (res.ok) return c.json(ok());
    if (res.reason === "RATE_LIMITED") throw new AppError("RATE_LIMITED", res.message, { retryAfterSeconds: res.retryAfterSeconds });
    throw new AppError("UNAVAILABLE", res.message);
  })
  .post("/login", jsonBody(BODY_LIMITS.login), v("json", LoginBody), async (c) => {
    const { phone, code } = c.req.valid("json");
    const res = await loginWithCode(c.get("deps"), phone, code);
    return c.json(res.ok ? ok(res.token) : fail("BAD_CODE", res.message));
  })
  .route("/", authed);

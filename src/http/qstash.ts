/**
 * `verifyQstash`: every QStash callback is verified, every time (no dev bypass). The raw body is
 * read first (the signature covers its exact bytes) and the signature must name this exact URL
 * (`sub` claim = PUBLIC_URL + path), so a message signed for one internal route cannot be replayed
 * against another. Expired or not-yet-valid tokens fail in `Receiver.verify`.
 */
import { createMiddleware } from "hono/factory";
import { AppError } from "../errors.ts";
import { internalUrl } from "../queue/messages.ts";
import type { AppEnv } from "../types.ts";

export type SignedEnv = AppEnv & { Variables: { rawBody: string } };

export const verifyQstash = createMiddleware<SignedEnv>(async (c, next) => {
  const signature = c.req.header("upstash-signature");
  if (!signature) throw new AppError("UNAUTHORIZED", "missing Upstash-Signature");
  const body = await c.req.text();
  const deps = c.get("deps");
  let valid = false;
  try {
    valid = await deps.receiver.verify({ signature, body, url: internalUrl(deps, c.req.path) });
  } catch {
    valid = false;
  }
  if (!valid) throw new AppError("UNAUTHORIZED", "invalid QStash signature");
  c.set("rawBody", body);
  await next();
});

/**
 * zod validators that answer malformed input with the 400 envelope (errors.ts validationHook).
 */
import { zValidator } from "@hono/zod-validator";
import type { ValidationTargets } from "hono";
import { z } from "zod";
import { validationHook } from "../errors.ts";

export const v = <T extends z.ZodType, Target extends keyof ValidationTargets>(target: Target, schema: T) =>
  zValidator(target, schema, (result) => validationHook(result as Parameters<typeof validationHook>[0]));

/** A positive database id in a path or query (rejects "abc", "1.5", "-3", "0", > 2^53). */
export const Id = z.coerce.number({ error: "must be a number" }).int("must be an integer").positive("must be positive").max(Number.MAX_SAFE_INTEGER);
export const IdParam = z.object({ id: Id });
/** 1-based page number, default 1, bounded so OFFSET stays cheap. */
export const Current = z.coerce.number().int().min(1).max(10_000).default(1);

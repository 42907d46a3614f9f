/**
 * zod validators that answer malformed input with the 400 envelope (errors.ts validationHook).
 */
import { zValidator } from "@hono/zod-validator";
import type { ValidationTargets } from "hono";
import { z } from "zod";
import { validationHook } from "../errors.ts";

/**
 * zod's synchronous parse: @hono/zod-validator defaults to `safeParseAsync`, whose extra promise
 * machinery costs about as much as the parse itself on every validated request. None of our
 * schemas has an async refinement; should one ever get one, zod throws `$ZodAsyncError` from the
 * sync parse and we fall back to the async one, so results never differ.
 */
function parseFast(schema: z.ZodType, value: unknown): z.ZodSafeParseResult<unknown> | Promise<z.ZodSafeParseResult<unknown>> {
  try {
    return schema.safeParse(value);
  } catch (err) {
    if (err instanceof z.core.$ZodAsyncError) return schema.safeParseAsync(value);
    throw err;
  }
}

export const v = <T extends z.ZodType, Target extends keyof ValidationTargets>(target: Target, schema: T) =>
  zValidator(target, schema, (result) => validationHook(result as Parameters<typeof validationHook>[0]), {
    // The option's type is conditional on the (generic) schema type; parseFast returns exactly what `schema.safeParse` does.
    validationFunction: parseFast as never,
  });

/** A positive database id in a path or query (rejects "abc", "1.5", "-3", "0", > 2^53). */
export const Id = z.coerce.number({ error: "must be a number" }).int("must be an integer").positive("must be positive").max(Number.MAX_SAFE_INTEGER);
export const IdParam = z.object({ id: Id });
/** 1-based page number, default 1, bounded so OFFSET stays cheap. */
export const Current = z.coerce.number().int().min(1).max(10_000).default(1);

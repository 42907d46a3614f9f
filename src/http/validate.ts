/**
 * zod validators that answer malformed input with the 400 envelope (errors.ts validationHook), and
 * the strict shapes of path/query numbers shared by the routes.
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
function parseFast(
  schema: z.ZodType,
  value: unknown,
): z.ZodSafeParseResult<unknown> | Promise<z.ZodSafeParseResult<unknown>> {
  try {
    return schema.safeParse(value);
  } catch (err) {
    if (err instanceof z.core.$ZodAsyncError) return schema.safeParseAsync(value);
    throw err;
  }
}

/**
 * `v("json", …)` reads the body through `c.req.json()`: put `jsonBody(maxBytes)` (src/http/body.ts)
 * before it, so the body is size- and depth-checked while it is read.
 */
export const v = <T extends z.ZodType, Target extends keyof ValidationTargets>(target: Target, schema: T) =>
  zValidator(target, schema, (result) => validationHook(result as Parameters<typeof validationHook>[0]), {
    // The option's type is conditional on the (generic) schema type; parseFast returns exactly what `schema.safeParse` does.
    validationFunction: parseFast as never,
  });

/**
 * Path and query numbers are plain decimal digits: no sign, exponent, hex, leading zero, space or
 * fraction (`z.coerce.number()` read `0x10`, `1e3`, `+1`, `01`, ` 1` and `""` as numbers). At most
 * 16 digits, so `Number()` is exact before the range check.
 */
const POSITIVE_DIGITS = /^[1-9][0-9]{0,15}$/;
const DIGITS = /^(?:0|[1-9][0-9]{0,15})$/;

/** A non-negative decimal integer in a path or query, at most `max` (≤ 2^53 − 1). */
export function queryInt(min: 0 | 1, max: number) {
  const re = min === 1 ? POSITIVE_DIGITS : DIGITS;
  const what = min === 1 ? "a positive decimal integer" : "a decimal integer";
  return z
    .string({ error: `must be ${what}` })
    .regex(re, `must be ${what}`)
    .transform(Number)
    .pipe(z.number().max(max, `must be at most ${max}`));
}

/** A positive database id in a path or query: `/^[1-9][0-9]{0,15}$/` and ≤ 2^53 − 1. */
export const Id = queryInt(1, Number.MAX_SAFE_INTEGER);
export const IdParam = z.object({ id: Id });
/** 1-based page number, default 1, bounded so OFFSET stays cheap. */
export const Current = queryInt(1, 10_000).default(1);

/**
 * A positive id in a JSON body: a JSON number (not `"1"`), integral, ≤ 2^53 − 1 (ids are BIGINT
 * UNSIGNED columns; larger ones never exist because JSON numbers above 2^53 are not exact).
 */
export const JsonId = z
  .number({ error: "must be a number" })
  .int("must be an integer")
  .min(1, "must be positive")
  .max(Number.MAX_SAFE_INTEGER);

/** Column bounds (src/db/migrations): MySQL answers a value outside them with an error, i.e. a 500. */
export const INT_UNSIGNED_MAX = 4_294_967_295;

/**
 * Text for a VARCHAR(n) column: at most `n` UTF-16 units (never more characters than MySQL counts)
 * and well-formed (a lone surrogate from a `\ud800` escape has no UTF-8 form for utf8mb4).
 */
export function varchar(n: number) {
  return z
    .string({ error: "must be a string" })
    .max(n, `at most ${n} characters`)
    .refine(isWellFormed, "not valid Unicode text")
    .refine((s) => !CONTROL_CHARS.test(s), "control characters are not allowed (tab and line breaks are)");
}

/** C0 controls but tab, LF and CR, and DEL: never text a person typed (`\u0000` was stored as is). */
const CONTROL_CHARS = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/;

/** `String.prototype.isWellFormed` (ES2024; in Bun, Deno and workerd, not yet in our TS lib). */
const isWellFormed = (s: string): boolean => (s as unknown as { isWellFormed(): boolean }).isWellFormed();

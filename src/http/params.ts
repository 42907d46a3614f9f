/**
 * Path parameters parsed synchronously in the handler, with the same schemas and the same 400
 * envelope as `v("param", …)` (validate.ts). Used on the cached GETs, where the validator
 * middleware's extra async frame was a measurable share of an L1 hit (src/http/edge.ts).
 */
import type { z } from "zod";
import { validationHook } from "../errors.ts";

export function parseParams<T extends z.ZodType>(schema: T, params: Record<string, string>): z.output<T> {
  const result = schema.safeParse(params);
  if (!result.success) validationHook(result as Parameters<typeof validationHook>[0]);
  return (result as { data: z.output<T> }).data;
}

import { Hono } from "hono";
import { z } from "zod";
import { AppError, ok } from "../errors.ts";
import { requireOperator } from "../http/auth.ts";
import { doc, v } from "../openapi/describe.ts";
import { isoDay, UV_MAX_RANGE_DAYS, uvReport } from "../services/uv.ts";
import type { AppEnv } from "../types.ts";
import { parseIsoDate } from "../util/time.ts";

const IsoDate = z
  .string({ error: "must be YYYY-MM-DD" })
  .regex(/^\d{4}-\d{2}-\d{2}$/, "must be YYYY-MM-DD")
  .refine((s) => parseIsoDate(s) !== null, "not a calendar date (YYYY-MM-DD, years 1000-9999)");

const RangeQuery = z.object({ from: IsoDate.optional(), to: IsoDate.optional() });

/** Mounted at /admin/uv (operator). `to` defaults to today, `from` to `to`; the range is inclusive and bounded. */
export const uv = new Hono<AppEnv>().get(
  "/",
  requireOperator,
  doc(
    {
      tag: "operator",
      summary: "Unique visitors per day and over the range (inclusive; `to` defaults to today, `from` to `to`)",
      access: "operator",
      data: { type: "object" },
      errors: ["INVALID_INPUT"],
    },
    v("query", RangeQuery),
  ),
  async (c) => {
    const deps = c.get("deps");
    const q = c.req.valid("query");
    const today = isoDay(deps.clock.now(), deps.config.SERVICE_TIME_ZONE);
    const to = q.to ?? today;
    const from = q.from ?? to;
    if (from > to) throw new AppError("INVALID_INPUT", "from must not be after to");
    const days = ((parseIsoDate(to) ?? 0) - (parseIsoDate(from) ?? 0)) / 86_400_000 + 1;
    if (days > UV_MAX_RANGE_DAYS) throw new AppError("INVALID_INPUT", `at most ${UV_MAX_RANGE_DAYS} days per query`);
    return c.json(ok(await uvReport(deps, from, to)));
  },
);

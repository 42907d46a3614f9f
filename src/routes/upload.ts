import { type Context, Hono } from "hono";
import { z } from "zod";
import { AppError, fail, ok } from "../errors.ts";
import { requireUser, type UserEnv } from "../http/auth.ts";
import { multipartBody } from "../http/body.ts";
import { idempotentUser } from "../http/idempotency.ts";
import { doc, type RouteDoc, v } from "../openapi/describe.ts";
import { deleteBlogImage, keyOfName, readBlogImage, saveBlogImage } from "../services/upload.ts";
import { admitUpload } from "../services/upload-limits.ts";
import type { AppEnv } from "../types.ts";

/** The upload path; app.ts exempts it from the global MAX_BODY_BYTES limit (this route has its own). */
export const UPLOAD_PATH = "/api/upload/blog";

/** Multipart framing allowed on top of UPLOAD_MAX_BYTES (boundaries, part headers), bytes. */
const MULTIPART_OVERHEAD = 16 * 1024;

/** One file plus a few fields: anything with more parts is refused before the parser runs. */
export const MAX_UPLOAD_PARTS = 8;

/**
 * Before a byte of the body is read (its headers have passed): a slot of the isolate's
 * UPLOAD_CONCURRENCY (503 + Retry-After 1 without one, before any Redis call), then the user's
 * rate and quota (429 with Retry-After; services/upload-limits.ts admitUpload). Only then is the
 * body read, streamed through UPLOAD_MAX_BYTES + framing; the slot is held until the answer.
 */
async function admit(c: Context<UserEnv>, read: () => Promise<void>): Promise<void> {
  const deps = c.get("deps");
  const slots = deps.isolate.uploadSlots;
  const slot = slots.tryTake(deps.clock.now());
  if (slot === undefined)
    throw new AppError("UNAVAILABLE", "too many uploads in progress; try again shortly", { retryAfterSeconds: 1 });
  try {
    const declared = c.req.raw.headers.get("content-length");
    const atLeast = declared === null ? 1 : Math.max(1, Number(declared) - MULTIPART_OVERHEAD);
    const refused = await admitUpload(deps, c.get("user").id, atLeast);
    if (refused)
      throw new AppError(refused.reason, refused.message, { retryAfterSeconds: refused.retryAfterMs / 1000 });
    await read();
  } finally {
    slots.release(slot);
  }
}

/** Caps the raw body at UPLOAD_MAX_BYTES + framing before anything parses it, once admitted. */
const uploadBody = multipartBody<UserEnv>(
  { config: "UPLOAD_MAX_BYTES", plus: MULTIPART_OVERHEAD },
  MAX_UPLOAD_PARTS,
  (c) => `file larger than ${c.get("deps").config.UPLOAD_MAX_BYTES} bytes`,
  admit,
);

const DeleteQuery = z.object({ name: z.string().min(1).max(300) });

const UPLOAD: RouteDoc = {
  tag: "uploads",
  summary:
    "Upload a note image (multipart field `file`: JPEG, PNG, WebP or GIF); `data` is its name, served at /imgs + name",
  description:
    "At most UPLOAD_MAX_BYTES (413 above; this route is exempt from MAX_BODY_BYTES). Per user: a token bucket (UPLOAD_BUCKET_*; 429 RATE_LIMITED) and a daily byte quota (UPLOAD_QUOTA_BYTES_PER_DAY; 429 QUOTA_EXCEEDED, Retry-After to the next service day), both checked before the body is read (a token is spent once the body is read, valid image or not); deleting an upload does not refund the quota. At most UPLOAD_CONCURRENCY uploads per isolate at once (503 UNAVAILABLE with Retry-After beyond).",
  access: "user",
  data: z.string().describe("e.g. /blogs/3/9/<uuid>.png"),
  errors: ["INVALID_INPUT", "PAYLOAD_TOO_LARGE", "RATE_LIMITED", "QUOTA_EXCEEDED", "UNAVAILABLE"],
  requestBody: {
    required: true,
    content: {
      "multipart/form-data": {
        schema: {
          type: "object",
          properties: { file: { type: "string", contentMediaType: "application/octet-stream" } },
          required: ["file"],
        },
      },
    },
  },
};
const IMAGE: RouteDoc = {
  tag: "uploads",
  summary: "An uploaded image, by the name its upload returned (`{path}` is the rest of that name, slashes included)",
  access: "public",
  responses: {
    200: {
      description: "The image (immutable: names are never reused)",
      content: { "image/*": { schema: { type: "string", contentMediaType: "application/octet-stream" } } },
    },
    404: {
      description: "No such image: NOT_FOUND",
      content: { "application/json": { schema: { $ref: "#/components/schemas/Failure" } } },
    },
  },
};

/** Mounted at /api/upload. */
export const upload = new Hono<UserEnv>()
  .use(requireUser)
  .post(
    "/blog",
    uploadBody,
    idempotentUser((config) => config.UPLOAD_MAX_BYTES + MULTIPART_OVERHEAD),
    doc(UPLOAD, async (c) => {
      const form = await c.req.parseBody().catch((err: unknown) => {
        if (err instanceof AppError) throw err;
        throw new AppError("INVALID_INPUT", "expected a multipart/form-data body", { cause: err });
      });
      const file = form.file;
      if (!(file instanceof File)) throw new AppError("INVALID_INPUT", "multipart field `file` (a file) is required");
      const deps = c.get("deps");
      const res = await saveBlogImage(deps, c.get("user").id, new Uint8Array(await file.arrayBuffer()));
      if (res.ok) return c.json(ok(res.name));
      if (res.reason === "TOO_LARGE")
        throw new AppError("PAYLOAD_TOO_LARGE", `file larger than ${deps.config.UPLOAD_MAX_BYTES} bytes`);
      if (res.reason === "RATE_LIMITED" || res.reason === "QUOTA_EXCEEDED")
        throw new AppError(res.reason, res.message, { retryAfterSeconds: res.retryAfterMs / 1000 });
      throw new AppError(
        "INVALID_INPUT",
        res.reason === "EMPTY" ? "the file is empty" : "only JPEG, PNG, WebP and GIF images are accepted",
      );
    }),
  )
  .get(
    "/blog/delete",
    doc(
      {
        tag: "uploads",
        summary: "Delete one of the caller's own uploads, by the name the upload returned",
        access: "user",
        errors: ["INVALID_INPUT", "FORBIDDEN"],
        outcomes: ["NOT_FOUND"],
      },
      v("query", DeleteQuery),
    ),
    async (c) => {
      const key = keyOfName(c.req.valid("query").name);
      if (!key) throw new AppError("INVALID_INPUT", "not an upload name");
      const res = await deleteBlogImage(c.get("deps"), c.get("user").id, key);
      if (res.ok) return c.json(ok());
      if (res.reason === "FORBIDDEN") throw new AppError("FORBIDDEN", "you can only delete your own uploads");
      return c.json(fail("NOT_FOUND", "upload not found"));
    },
  );

/** Mounted at /imgs (public): serves uploads by the names handed out. Names are immutable. */
export const imgs = new Hono<AppEnv>().get(
  "/blogs/*",
  doc(IMAGE, async (c) => {
    const key = keyOfName(c.req.path.slice("/imgs".length));
    const found = key ? await readBlogImage(c.get("deps"), key) : null;
    if (!found) return c.json(fail("NOT_FOUND", "image not found", c.get("requestId")), 404);
    return c.body(found.body as ReadableStream<Uint8Array> | Uint8Array<ArrayBuffer>, 200, {
      "content-type": found.contentType,
      "content-length": String(found.size),
      "cache-control": "public, max-age=31536000, immutable",
    });
  }),
);

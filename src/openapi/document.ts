/**
 * The OpenAPI 3.1 document of an app, generated from its route table: hono-openapi's
 * `generateSpecs` walks `app.routes` and merges the descriptions `doc`/`v` (describe.ts) left on
 * each route's handlers. Built once per app, on first request (the route table is final by then).
 */
import type { Hono } from "hono";
import { findTargetHandler } from "hono/utils/handler";
import { generateSpecs, uniqueSymbol } from "hono-openapi";
import pkg from "../../package.json" with { type: "json" };
import { codeToStatus, type ErrorCode } from "../errors.ts";
import type { AppEnv } from "../types.ts";
import type { JsonSchema, Tag } from "./describe.ts";

export type OpenApiDocument = {
  openapi: string;
  info: Record<string, unknown>;
  paths: Record<string, Record<string, Record<string, unknown>>>;
  components?: Record<string, unknown>;
  [key: string]: unknown;
};

const TAGS: { name: Tag; description: string }[] = [
  { name: "site", description: "The pages of this service and this reference." },
  { name: "service", description: "Liveness of the service and its dependencies." },
  { name: "user", description: "Login by SMS code, sessions, profiles and daily sign-in." },
  { name: "shops", description: "Shops, shop types and nearby search." },
  { name: "vouchers", description: "Vouchers of a shop; seckill (flash-sale) vouchers carry stock and a sale window." },
  { name: "orders", description: "Seckill orders: reserve, look up, pay." },
  { name: "notes", description: "Notes (blogs), likes and the follow feed." },
  { name: "follows", description: "Following users." },
  { name: "uploads", description: "Note images: upload, delete, serve." },
  { name: "operator", description: "Operator routes: `authorization: Bearer <ADMIN_TOKEN>`; user tokens never pass." },
  {
    name: "callbacks",
    description:
      "Signed callbacks (QStash deliveries, payment webhooks). Not for clients: every call is verified against its signature.",
  },
];

const CODES = Object.keys(codeToStatus) as ErrorCode[];

const DESCRIPTION = `Flash-sale (seckill) backend keeping the API of the classic hm-dianping service.

**Envelope.** Every \`/api\` response is \`{success, errorMsg?, code?, data?, total?, requestId?}\`; absent fields are omitted, an empty success is exactly \`{"success":true}\`.
Business outcomes (sold out, duplicate order, wrong code, unknown shop) are HTTP 200 with \`success:false\` and a \`code\`; malformed input is 400, not logged in 401, rate limited 429 (with \`Retry-After\`), unexpected 500 with the request id.
Every response carries an \`x-request-id\` header.

**Error codes** and the status each is answered with (routes list the ones they can answer):

| code | status |
|---|---|
${CODES.map((c) => `| \`${c}\` | ${codeToStatus[c]} |`).join("\n")}

Order ids are 64-bit and sent as JSON strings; path and query ids are plain decimal digits.
A body larger than the route's limit is a 413 before it is read.`;

const COMPONENTS = {
  securitySchemes: {
    userToken: {
      type: "apiKey",
      in: "header",
      name: "authorization",
      description:
        "The token `POST /api/user/login` returned, raw (`authorization: <token>`) or as `Bearer <token>`. " +
        "When less than half of its lifetime (SESSION_MAX_AGE_SECONDS) is left, a response may carry `X-Session-Token`: a fresh token for the same session with a later expiry (never past SESSION_HARD_CAP_SECONDS after sign-in); send it from then on. " +
        "The old token keeps working until its own expiry; a logout with either ends both.",
    },
    operatorBearer: {
      type: "http",
      scheme: "bearer",
      description: "`authorization: Bearer <ADMIN_TOKEN>` (the configured operator secret).",
    },
    qstashSignature: {
      type: "apiKey",
      in: "header",
      name: "Upstash-Signature",
      description: "QStash's signature of the raw body, for this exact URL.",
    },
    paymentSignature: {
      type: "apiKey",
      in: "header",
      name: "x-payment-signature",
      description: "`t=<unix seconds>,v1=<hex HMAC-SHA256>` of the raw body with PAYMENT_WEBHOOK_SECRET.",
    },
  },
  schemas: {
    ErrorCode: { type: "string", enum: CODES, description: "Stable machine-readable failure code (src/errors.ts)." },
    Envelope: {
      type: "object",
      description: "The response envelope of every JSON route.",
      properties: {
        success: { type: "boolean" },
        errorMsg: { type: "string" },
        code: { $ref: "#/components/schemas/ErrorCode" },
        data: {},
        total: { type: "integer", minimum: 0 },
        requestId: { type: "string" },
      },
      required: ["success"],
    },
    Success: {
      allOf: [{ $ref: "#/components/schemas/Envelope" }, { type: "object", properties: { success: { const: true } } }],
    },
    Failure: {
      allOf: [
        { $ref: "#/components/schemas/Envelope" },
        { type: "object", properties: { success: { const: false } }, required: ["success", "errorMsg", "code"] },
      ],
    },
  } satisfies Record<string, JsonSchema>,
};

const BODY_METHODS = new Set(["post", "put", "patch", "delete"]);
const TOO_LARGE = {
  description: "Body too large: PAYLOAD_TOO_LARGE",
  content: {
    "application/json": {
      schema: {
        allOf: [
          { $ref: "#/components/schemas/Failure" },
          { type: "object", properties: { code: { enum: ["PAYLOAD_TOO_LARGE"] } } },
        ],
      },
    },
  },
};

type Described = { [uniqueSymbol]?: { spec?: Record<string, unknown> } };

/**
 * Wildcard routes (`/imgs/blogs/*`), which generateSpecs leaves out: documented with the rest of
 * the path as one `{path}` parameter.
 */
function wildcardPaths(app: Hono<AppEnv>): OpenApiDocument["paths"] {
  const paths: OpenApiDocument["paths"] = {};
  for (const route of app.routes) {
    if (route.method === "ALL" || !route.path.endsWith("/*") || route.path === "/*") continue;
    const spec = (findTargetHandler(route.handler) as Described)[uniqueSymbol]?.spec;
    if (!spec) continue;
    const path = `${route.path.slice(0, -2)}/{path}`.replace(/:([A-Za-z0-9_]+)/g, "{$1}");
    const rest = {
      name: "path",
      in: "path",
      required: true,
      description: "the rest of the path, slashes included",
      schema: { type: "string" },
    };
    paths[path] = {
      ...paths[path],
      [route.method.toLowerCase()]: { ...spec, parameters: [...((spec.parameters as unknown[]) ?? []), rest] },
    };
  }
  return paths;
}

async function build(app: Hono<AppEnv>): Promise<OpenApiDocument> {
  const generated = (await generateSpecs(app, {
    documentation: {
      info: { title: "CityHub Edge", version: pkg.version, description: DESCRIPTION },
      tags: TAGS,
      components: COMPONENTS as never,
    },
    defaultValidationErrorResponse: false,
    // `/openapi.json` and `/docs/init.js` are routes like any other.
    excludeStaticFile: false,
  })) as unknown as OpenApiDocument;
  const paths = { ...generated.paths, ...wildcardPaths(app) };
  for (const [path, item] of Object.entries(paths)) {
    for (const [method, op] of Object.entries(item)) {
      // Every body method passes the global body limit (app.ts) before its route.
      const responses = (op.responses ?? {}) as Record<string, unknown>;
      if (BODY_METHODS.has(method) && !responses["413"]) op.responses = { ...responses, 413: TOO_LARGE };
    }
    paths[path] = item;
  }
  return { ...generated, paths };
}

const built = new WeakMap<Hono<AppEnv>, Promise<OpenApiDocument>>();

/** The app's document, generated on first use and kept for the app's lifetime. */
export function openApiDocument(app: Hono<AppEnv>): Promise<OpenApiDocument> {
  let doc = built.get(app);
  if (!doc) {
    // A failed build is not kept: the next request tries again.
    doc = build(app).catch((err: unknown) => {
      built.delete(app);
      throw err;
    });
    built.set(app, doc);
  }
  return doc;
}

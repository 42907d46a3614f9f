/**
 * OpenAPI annotations for the routes, at no cost per request. `doc(spec, handler)` and `v(…)`
 * (same as http/validate.ts's) hang a description on a function the route chain already calls —
 * hono-openapi's `uniqueSymbol`, the property its `describeResponse` sets on a handler — instead
 * of adding a `describeRoute` middleware frame to every request. `generateSpecs` (document.ts)
 * reads them back from `app.routes`, so the document follows the route table as registered.
 *
 * Request schemas are the routes' own zod schemas, converted with zod's JSON Schema output (draft
 * 2020-12, OpenAPI 3.1's dialect) on their *input* side: what a client sends, before transforms.
 * Responses are the api.md envelope; each error code a route can answer is listed under the status
 * it is answered with — business outcomes (`outcomes`) under 200 with `success:false`, the others
 * at `codeToStatus` (`errors`).
 */
import type { ValidationTargets } from "hono";
import { type DescribeRouteOptions, uniqueSymbol } from "hono-openapi";
import { z } from "zod";
import { codeToStatus, type ErrorCode } from "../errors.ts";
import { v as validate } from "../http/validate.ts";

/** Who may call a route: the guard in front of it (src/http/auth.ts, qstash.ts, payments/signature.ts). */
export type Access = "public" | "optional-user" | "user" | "operator" | "qstash" | "webhook";

/** Groups of the reference, in the order they are listed (document.ts). */
export type Tag =
  | "site"
  | "service"
  | "user"
  | "shops"
  | "vouchers"
  | "orders"
  | "notes"
  | "follows"
  | "uploads"
  | "operator"
  | "callbacks";

/** A JSON Schema (2020-12) object, as OpenAPI 3.1 embeds it. */
export type JsonSchema = Record<string, unknown>;

export interface RouteDoc {
  tag: Tag;
  summary: string;
  description?: string;
  access: Access;
  /** Path / query / JSON body schemas for routes that parse them in the handler (the `v` validators describe themselves). */
  params?: z.ZodType;
  query?: z.ZodType;
  body?: z.ZodType;
  /** A request body that is not JSON (uploads), as an OpenAPI request body object. */
  requestBody?: { required?: boolean; content: Record<string, unknown> };
  /** Shape of `data` on success (omitted: the route answers `{"success":true}` or documents it in prose). */
  data?: z.ZodType | JsonSchema;
  /** Codes answered with HTTP 200 and `success:false` (api.md "Status codes"). */
  outcomes?: readonly ErrorCode[];
  /** Codes answered at their `codeToStatus` status (400s, 401, 403, 409, 413, 429, 503). */
  errors?: readonly ErrorCode[];
  /** A 200 answer that is not the JSON envelope (a text format), as OpenAPI content; error statuses are still generated. */
  okContent?: Record<string, unknown>;
  /** Replaces the generated responses (pages, images, /health). */
  responses?: Record<string, unknown>;
}

const SECURITY: Record<Access, DescribeRouteOptions["security"]> = {
  public: [],
  // Anonymous or signed in: both are valid.
  "optional-user": [{}, { userToken: [] }],
  user: [{ userToken: [] }],
  operator: [{ operatorBearer: [] }],
  qstash: [{ qstashSignature: [] }],
  webhook: [{ paymentSignature: [] }],
};

/** zod → JSON Schema of what a client sends (before transforms; refinements are not representable and are dropped). */
export function inputSchema(schema: z.ZodType): JsonSchema {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, { io: "input", unrepresentable: "any" }) as JsonSchema;
  return rest;
}

function outputSchema(schema: z.ZodType | JsonSchema): JsonSchema {
  if (!(schema instanceof z.ZodType)) return schema;
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, { io: "output", unrepresentable: "any" }) as JsonSchema;
  return rest;
}

type In = "path" | "query";

/** One OpenAPI parameter per property of an object schema (path parameters are always required). */
export function parametersOf(where: In, schema: z.ZodType): Record<string, unknown>[] {
  const json = inputSchema(schema);
  const props = (json.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set((json.required ?? []) as string[]);
  return Object.entries(props).map(([name, s]) => {
    const { description, ...rest } = s;
    return {
      name,
      in: where,
      required: where === "path" || required.has(name),
      schema: rest,
      ...(description ? { description } : {}),
    };
  });
}

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

function failure(codes: readonly ErrorCode[]): JsonSchema {
  return { allOf: [ref("Failure"), { type: "object", properties: { code: { enum: [...codes] } } }] };
}

function success(data: z.ZodType | JsonSchema | undefined): JsonSchema {
  if (!data) return ref("Success");
  return { allOf: [ref("Success"), { type: "object", properties: { data: outputSchema(data) } }] };
}

const RETRY_AFTER = {
  "Retry-After": { description: "seconds until a retry may succeed", schema: { type: "integer" } },
};

/** What the five listing routes say about their per-address limit (http/listing-limit.ts). */
export const LISTING_LIMIT_NOTE =
  "Listing/search routes share one budget per client address (IPv6: per /64): LISTING_IP_LIMIT requests per LISTING_IP_WINDOW_MS across them, answered from the isolate's memory; over it, 429 RATE_LIMITED with Retry-After.";
/** What the non-core routes say about degrading (http/degrade.ts). */
export const NON_CORE_NOTE =
  "Non-core: while Redis's circuit breaker is open or probing, answered 503 UNAVAILABLE with Retry-After at once, without calling Redis.";

const STATUS_TEXT: Record<number, string> = {
  400: "Malformed input (bad JSON, wrong types, out-of-range ids)",
  401: "Not logged in, or missing/invalid credentials or signature",
  403: "Not allowed",
  404: "Not found",
  409: "Conflict",
  413: "Body too large",
  429: "Rate limited (see `Retry-After`)",
  500: "Unexpected error (the envelope carries the request id, never a stack trace)",
  503: "A dependency is unavailable (timed out, failing, or its circuit breaker is open), or a non-core feature is switched off while Redis's is (see `Retry-After`)",
};

const json = (schema: JsonSchema) => ({ "application/json": { schema } });

/** The responses of a JSON route: 200 (success, or a business outcome), then one entry per error status. */
function responsesOf(spec: RouteDoc, implied: readonly ErrorCode[]): Record<string, unknown> {
  const outcomes = spec.outcomes ?? [];
  const ok = success(spec.data);
  const responses: Record<string, unknown> = {
    200: {
      description: outcomes.length
        ? `Success, or a business outcome with \`success:false\`: ${outcomes.join(", ")}`
        : "Success",
      content: spec.okContent ?? json(outcomes.length ? { oneOf: [ok, failure(outcomes)] } : ok),
    },
  };
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of new Set([...implied, ...(spec.errors ?? []), "INTERNAL" as const])) {
    const status = codeToStatus[code];
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  for (const [status, codes] of [...byStatus].sort(([a], [b]) => a - b)) {
    responses[status] = {
      description: `${STATUS_TEXT[status] ?? "Error"}: ${codes.join(", ")}`,
      // 429s and 503s carry Retry-After (errors.ts handleError): the limit's window, or the breaker's next probe.
      ...(status === 429 || status === 503 ? { headers: RETRY_AFTER } : {}),
      content: json(failure(codes)),
    };
  }
  return responses;
}

/** The OpenAPI operation of a route, from its description (parameters of `v` validators are added by hono-openapi). */
export function operationOf(spec: RouteDoc): DescribeRouteOptions {
  const implied: ErrorCode[] = [];
  if (spec.params || spec.query || spec.body) implied.push("INVALID_INPUT");
  if (spec.access !== "public" && spec.access !== "optional-user") implied.push("UNAUTHORIZED");
  const parameters = [
    ...(spec.params ? parametersOf("path", spec.params) : []),
    ...(spec.query ? parametersOf("query", spec.query) : []),
  ];
  const op: DescribeRouteOptions & Record<string, unknown> = {
    tags: [spec.tag],
    summary: spec.summary,
    ...(spec.description ? { description: spec.description } : {}),
    ...(spec.access === "public" ? {} : { security: SECURITY[spec.access] }),
    ...(parameters.length ? { parameters: parameters as DescribeRouteOptions["parameters"] } : {}),
    ...(spec.body
      ? { requestBody: { required: true, content: json(inputSchema(spec.body)) } }
      : spec.requestBody
        ? { requestBody: spec.requestBody as DescribeRouteOptions["requestBody"] }
        : {}),
    responses: (spec.responses ?? responsesOf(spec, implied)) as DescribeRouteOptions["responses"],
  };
  if (spec.access === "qstash" || spec.access === "webhook") op["x-signed-callback"] = spec.access;
  return op;
}

type Described = { [uniqueSymbol]?: { readonly spec: DescribeRouteOptions } };

/**
 * Hangs a description on `target`, built on first read (when the document is generated): zod's
 * JSON Schema conversion costs ~0.1 ms a schema, which would otherwise be paid by every isolate's
 * start-up for a document most isolates never serve.
 */
function describe<H extends object>(target: H, build: () => DescribeRouteOptions): H {
  let built: DescribeRouteOptions | undefined;
  const described = {
    get spec(): DescribeRouteOptions {
      built ??= build();
      return built;
    },
  };
  return Object.defineProperty(target, uniqueSymbol, { value: described, configurable: true, enumerable: false });
}

/**
 * Describes a route. `target` is the route's last validator (`v(…)` below) when it has one — so
 * the handler after it keeps its inferred `c.req.valid` types — else its handler. Returns `target`
 * itself (no wrapper, no extra frame): the description is a property hono-openapi reads when it
 * generates the document, merged here with the validator's own (its parameters or body, its 400).
 */
export function doc<H extends object>(spec: RouteDoc, target: H): H {
  const own = (target as Described)[uniqueSymbol];
  return describe(target, () => {
    const op = operationOf(spec);
    const base = own?.spec;
    if (!base) return op;
    const merged: DescribeRouteOptions = {
      ...base,
      ...op,
      parameters: [...(base.parameters ?? []), ...(op.parameters ?? [])],
      responses: { ...base.responses, ...op.responses },
    };
    if (!merged.parameters?.length) delete merged.parameters;
    return merged;
  });
}

/** Where a validator's schema goes in the document, by its target (`json`: the request body). */
const PARAMETER_IN: Partial<Record<keyof ValidationTargets, In>> = { param: "path", query: "query" };

const INVALID_INPUT_RESPONSE = {
  400: { description: `${STATUS_TEXT[400]}: INVALID_INPUT`, content: json(failure(["INVALID_INPUT"])) },
};

/**
 * http/validate.ts's `v`, unchanged, plus its schema as OpenAPI parameters or a JSON request body
 * and the 400 it answers.
 */
export const v = <T extends z.ZodType, Target extends keyof ValidationTargets>(target: Target, schema: T) => {
  const where = PARAMETER_IN[target];
  return describe(
    validate(target, schema),
    () =>
      ({
        ...(where
          ? { parameters: parametersOf(where, schema) }
          : { requestBody: { required: true, content: json(inputSchema(schema)) } }),
        responses: INVALID_INPUT_RESPONSE,
      }) as DescribeRouteOptions,
  );
};

/**
 * The description http/idempotency.ts's middleware carries on the routes that take an
 * `Idempotency-Key`: the optional header and the answers only a keyed request can get.
 */
export function idempotencyDoc<H extends object>(target: H): H {
  return describe(
    target,
    () =>
      ({
        parameters: [
          {
            name: "Idempotency-Key",
            in: "header",
            required: false,
            description:
              "Makes a retry safe (draft-ietf-httpapi-idempotency-key-header): 1–255 visible ASCII characters, bare or as a quoted sf-string, scoped to the caller and this route and kept 24 h. A retry with the same request replays the stored response with `Idempotent-Replayed: true`; failures (4xx, 5xx) are not stored.",
            schema: { type: "string", minLength: 1, maxLength: 512 },
          },
        ],
        responses: {
          409: {
            description: "A request with this Idempotency-Key is still running: CONFLICT",
            headers: RETRY_AFTER,
            content: json(failure(["CONFLICT"])),
          },
          422: {
            description: "This Idempotency-Key was used with a different request: IDEMPOTENCY_KEY_REUSED",
            content: json(failure(["IDEMPOTENCY_KEY_REUSED"])),
          },
        },
      }) as DescribeRouteOptions,
  );
}

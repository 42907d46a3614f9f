/**
 * Error codes, the response envelope of api.md, and the single place errors become responses.
 *
 * Envelope: `{ success, errorMsg?, data?, total?, code? }`, absent fields omitted. Business
 * outcomes are 200 + success:false (classic clients read `success`); 400 for malformed input,
 * 401 not logged in, 403 not allowed, 404 unknown route, 413 body too large, 415 a body of a type
 * the route does not take, 429 rate limited (with Retry-After), 431 URL or headers too large,
 * 500 unexpected (with the request id, never a stack trace), 503 dependency down.
 */
import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { DependencyUnavailableError, isRedisFull, isRedisThrottled } from "./resilience.ts";
import type { AppEnv } from "./types.ts";

export type ErrorCode =
  | "INVALID_INPUT"
  | "UNAUTHORIZED"
  | "FORBIDDEN"
  | "NOT_FOUND"
  | "METHOD_NOT_ALLOWED"
  | "PAYLOAD_TOO_LARGE"
  | "UNSUPPORTED_MEDIA_TYPE"
  | "HEADERS_TOO_LARGE"
  | "RATE_LIMITED"
  | "QUOTA_EXCEEDED"
  | "BAD_CODE"
  | "SOLD_OUT"
  | "DUPLICATE_ORDER"
  | "NOT_STARTED"
  | "ENDED"
  | "LIMIT_REACHED"
  | "BAD_STATE"
  | "CONFLICT"
  | "IDEMPOTENCY_KEY_REUSED"
  | "UNAVAILABLE"
  | "OUTCOME_UNKNOWN"
  | "BAD_ENVIRONMENT"
  | "INTERNAL";

/** HTTP status per code. Business outcomes stay 200 (api.md "Status codes"). */
export const codeToStatus: Record<ErrorCode, ContentfulStatusCode> = {
  INVALID_INPUT: 400,
  UNAUTHORIZED: 401,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  METHOD_NOT_ALLOWED: 405,
  PAYLOAD_TOO_LARGE: 413,
  /** A non-empty body of a content type the route does not take (src/http/body.ts), refused before it is read. */
  UNSUPPORTED_MEDIA_TYPE: 415,
  /** A URL or header block past the app's limits (src/http/request-size.ts), refused before routing. */
  HEADERS_TOO_LARGE: 431,
  RATE_LIMITED: 429,
  /** A per-user quota (upload bytes per day) is used up; Retry-After says when it renews. */
  QUOTA_EXCEEDED: 429,
  BAD_CODE: 200,
  SOLD_OUT: 200,
  DUPLICATE_ORDER: 200,
  NOT_STARTED: 200,
  ENDED: 200,
  LIMIT_REACHED: 200,
  BAD_STATE: 200,
  CONFLICT: 409,
  /** An Idempotency-Key sent again with a different request (draft-ietf-httpapi-idempotency-key-header: 422). */
  IDEMPOTENCY_KEY_REUSED: 422,
  UNAVAILABLE: 503,
  /** A write whose reply was lost and could not be settled: retry to learn what happened. */
  OUTCOME_UNKNOWN: 503,
  BAD_ENVIRONMENT: 500,
  INTERNAL: 500,
};

export interface Envelope<T = unknown> {
  success: boolean;
  errorMsg?: string;
  code?: ErrorCode;
  data?: T;
  total?: number;
  requestId?: string;
}

export class AppError extends HTTPException {
  readonly code: ErrorCode;
  readonly retryAfterSeconds?: number;
  constructor(
    code: ErrorCode,
    message: string,
    opts: { status?: ContentfulStatusCode; retryAfterSeconds?: number; cause?: unknown } = {},
  ) {
    super(opts.status ?? codeToStatus[code], { message, cause: opts.cause });
    this.name = "AppError";
    this.code = code;
    this.retryAfterSeconds = opts.retryAfterSeconds;
  }
}

/** `{"success":true}` plus `data`/`total` only when given (absent, not null). */
export function ok<T>(data?: T, total?: number): Envelope<T> {
  const body: Envelope<T> = { success: true };
  if (data !== undefined) body.data = data;
  if (total !== undefined) body.total = total;
  return body;
}

export function fail(code: ErrorCode, errorMsg: string, requestId?: string): Envelope<never> {
  const body: Envelope<never> = { success: false, errorMsg, code };
  if (requestId) body.requestId = requestId;
  return body;
}

function statusToCode(status: number): ErrorCode {
  switch (status) {
    case 400:
    case 422:
      return "INVALID_INPUT";
    case 401:
      return "UNAUTHORIZED";
    case 403:
      return "FORBIDDEN";
    case 404:
      return "NOT_FOUND";
    case 405:
      return "METHOD_NOT_ALLOWED";
    case 413:
      return "PAYLOAD_TOO_LARGE";
    case 415:
      return "UNSUPPORTED_MEDIA_TYPE";
    case 431:
      return "HEADERS_TOO_LARGE";
    case 429:
      return "RATE_LIMITED";
    case 503:
      return "UNAVAILABLE";
    default:
      return status >= 500 ? "INTERNAL" : "INVALID_INPUT";
  }
}

/** Retry-After of a DependencyUnavailableError somewhere in a cause chain (≤ 4 deep), seconds. */
function dependencyRetryAfterSeconds(cause: unknown): number | undefined {
  for (let i = 0; i < 4 && cause instanceof Error; i++, cause = cause.cause) {
    if (cause instanceof DependencyUnavailableError) return cause.retryAfterMs / 1000;
  }
  return undefined;
}

/** The app's `onError`: AppError, then any HTTPException (validators, body limit), then unknown. */
export function handleError(err: Error, c: Context<AppEnv>): Response {
  const requestId = c.get("requestId");
  if (err instanceof DependencyUnavailableError) {
    // A timeout, a failure or an open breaker (src/resilience.ts): the dependency is named, and
    // Retry-After is the time until the breaker's next probe — never a 500.
    c.header("Retry-After", String(Math.max(1, Math.ceil(err.retryAfterMs / 1000))));
    return c.json(fail("UNAVAILABLE", `${err.message}; try again shortly`, requestId), 503);
  }
  if (isRedisThrottled(err)) {
    // A database over its command budget refused the request before it ran: retry shortly.
    c.header("Retry-After", "1");
    return c.json(fail("UNAVAILABLE", "redis is over its command budget; try again shortly", requestId), 503);
  }
  if (isRedisFull(err)) {
    // A full database (eviction off) refused a write before it ran: nothing was done; retry later.
    c.header("Retry-After", "5");
    return c.json(fail("UNAVAILABLE", "redis is full; try again shortly", requestId), 503);
  }
  if (err instanceof AppError) {
    const retryAfter = err.retryAfterSeconds ?? dependencyRetryAfterSeconds(err.cause);
    if (retryAfter !== undefined) c.header("Retry-After", String(Math.max(1, Math.ceil(retryAfter))));
    return c.json(fail(err.code, err.message, requestId), err.status as ContentfulStatusCode);
  }
  if (err instanceof HTTPException) {
    const status = err.status as ContentfulStatusCode;
    const code = statusToCode(status);
    const message =
      status === 400 && /JSON/i.test(err.message) ? "malformed JSON body" : err.message || code.toLowerCase();
    return c.json(fail(code, message, requestId), status);
  }
  const log = c.get("log");
  if (log) log.error("unhandled error", { err, path: c.req.path, method: c.req.method });
  else console.error(err);
  return c.json(fail("INTERNAL", "internal error", requestId), 500);
}

/** Hook for `zValidator`: a failed schema is a 400 envelope naming the first offending fields. */
export function validationHook(
  result:
    | { success: true }
    | { success: false; error: { issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }> } },
): void {
  if (result.success) return;
  const msg = result.error.issues
    .slice(0, 3)
    .map((i) => `${i.path.map(String).join(".") || "input"}: ${i.message}`)
    .join("; ");
  throw new AppError("INVALID_INPUT", msg || "invalid input");
}

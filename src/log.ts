/**
 * Structured JSON logs, one object per line on stdout/stderr — what Workers Logs, Bun and Deno
 * collectors all ingest. Per-request fields (requestId, route) are bound with `child`.
 *
 * `child` is on every request's path (app.ts binds the request id), so it only records its fields:
 * they are merged into the line when one is actually written, which at production levels is rare.
 */
import { scrub } from "./util/scrub.ts";
export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";
const rank: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
  /** Whether a line at `level` would be written (lets callers skip building the fields). */
  enabled(level: Exclude<LogLevel, "silent">): boolean;
}

export function createLogger(level: LogLevel, bound: Record<string, unknown> = {}): Logger {
  return new JsonLogger(rank[level], bound, undefined);
}

class JsonLogger implements Logger {
  constructor(
    private readonly min: number,
    private readonly bound: Record<string, unknown>,
    /** A child's own fields, merged over `bound` only when a line is written. */
    private readonly own: Record<string, unknown> | undefined,
  ) {}

  // Arrow properties, not prototype methods: callers may pass `log.error` (or `log.child`) around detached.
  readonly debug = (msg: string, fields?: Record<string, unknown>): void => this.emit("debug", msg, fields);
  readonly info = (msg: string, fields?: Record<string, unknown>): void => this.emit("info", msg, fields);
  readonly warn = (msg: string, fields?: Record<string, unknown>): void => this.emit("warn", msg, fields);
  readonly error = (msg: string, fields?: Record<string, unknown>): void => this.emit("error", msg, fields);
  readonly enabled = (level: Exclude<LogLevel, "silent">): boolean => rank[level] >= this.min;
  readonly child = (fields: Record<string, unknown>): Logger =>
    new JsonLogger(this.min, this.own ? { ...this.bound, ...this.own } : this.bound, fields);

  private emit(lvl: Exclude<LogLevel, "silent">, msg: string, fields?: Record<string, unknown>): void {
    if (rank[lvl] < this.min) return;
    const line = JSON.stringify(
      { time: new Date().toISOString(), level: lvl, msg, ...this.bound, ...this.own, ...fields },
      errorReplacer,
    );
    if (rank[lvl] >= rank.warn) console.error(line);
    else console.log(line);
  }
}

/**
 * Errors are not enumerable: serialise their name, message and stack explicitly — scrubbed
 * (util/scrub.ts): a dependency's error text may carry other users' tokens. Causes likewise.
 */
function errorReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Error)
    return {
      name: value.name,
      message: scrub(value.message),
      stack: value.stack === undefined ? undefined : scrub(value.stack),
      ...(value.cause === undefined ? {} : { cause: value.cause }),
    };
  if (typeof value === "bigint") return value.toString();
  return value;
}

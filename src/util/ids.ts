/**
 * The one rule for 64-bit ids as text (order, payment and refund ids; src/redis/ids.ts makes
 * them): a decimal string without sign or leading zero, from 1 to 2^63 − 1 (MySQL's signed
 * BIGINT, the column they are stored in). JS numbers cannot hold them, so they travel as strings
 * — in answers, paths, queries, QStash and webhook bodies — and are checked here before any
 * `BigInt(…)` or query sees them. Routes use the zod schemas; services use `isId64`.
 */
import { z } from "zod";

/** The largest id: MySQL's signed BIGINT maximum, 2^63 − 1. */
export const MAX_ID64 = 9_223_372_036_854_775_807n;

/** Shape only (up to 19 digits, no leading zero); the range is checked by `isId64`. */
const ID64_SHAPE = /^[1-9]\d{0,18}$/;

/** Whether `s` is a 64-bit id as text (1 … 2^63 − 1, canonical decimal). */
export function isId64(s: string): boolean {
  return ID64_SHAPE.test(s) && BigInt(s) <= MAX_ID64;
}

/**
 * zod: a 64-bit id as text; `message` is the error of both checks. The pattern stays a `regex`
 * check so the OpenAPI document shows it (a refinement is not representable there); the range
 * check goes through `isId64`, which never hands a non-decimal string to `BigInt`.
 */
export function id64Text(message: string) {
  return z.string().regex(ID64_SHAPE, message).refine(isId64, message);
}

/** An order id (path parameter, query, message body). */
export const OrderId = id64Text("not an order id");
/** Same rule, by another name: order ids are what most callers check. */
export const isOrderId = isId64;

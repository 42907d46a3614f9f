/**
 * Login by SMS code (the classic flow, hardened):
 * - codes: 6 random digits in `login:code:{phone}` {code, tries} for LOGIN_CODE_TTL_SECONDS;
 * - sends limited per phone (1 a minute, 5 an hour) and per client address (per hour), with
 *   @upstash/ratelimit (its ephemeral cache answers repeat offenders without Redis);
 * - a code survives LOGIN_CODE_MAX_ATTEMPTS wrong tries, then it is burned; compared in constant
 *   time, consumed atomically (one login per code);
 * - an unknown phone registers a user (`user_` + random nickname); the session token is signed
 *   (services/session.ts) and its record written to Redis; logout revokes it everywhere
 *   (services/session-cache.ts).
 */
import { RATELIMIT_FAIL_CLOSED } from "../resilience.ts";
import { Ratelimit } from "@upstash/ratelimit";
import type { Deps, RedisPort } from "../deps.ts";
import { keys } from "../redis/keys.ts";
import { scriptsFor } from "../redis/scripts.ts";
import { timingSafeEqual } from "../util/crypto.ts";
import { createSession, type SessionUser } from "./session.ts";

export const PHONE_RE = /^1[3-9]\d{9}$/;
export const CODE_RE = /^\d{6}$/;

export type SendCodeResult =
  | { ok: true }
  | { ok: false; reason: "RATE_LIMITED"; retryAfterSeconds: number; message: string }
  | { ok: false; reason: "UNAVAILABLE"; message: string };
export type LoginResult =
  | { ok: true; token: string; user: SessionUser; created: boolean }
  | { ok: false; reason: "BAD_CODE"; message: string };

export interface LoginLimiters {
  perPhoneMinute: Ratelimit;
  perPhoneHour: Ratelimit;
  perIpHour: Ratelimit;
}

/**
 * The login-code limiters, built once per isolate (deps.isolate.loginLimiters). Each keeps an
 * ephemeral cache of callers it has seen blocked, so a blocked caller is refused without Redis
 * until its window ends (@upstash/ratelimit's ephemeralCache; bounded by the callers it blocks).
 */
export function createLoginLimiters(
  config: Pick<Deps["config"], "LOGIN_CODE_PHONE_INTERVAL_SECONDS" | "LOGIN_CODE_SENDS_PER_IP_HOUR">,
  redis: RedisPort,
): LoginLimiters {
  const base = { redis, analytics: false, timeout: RATELIMIT_FAIL_CLOSED, ephemeralCache: new Map<string, number>() };
  return {
    perPhoneMinute: new Ratelimit({
      ...base,
      limiter: Ratelimit.fixedWindow(1, `${config.LOGIN_CODE_PHONE_INTERVAL_SECONDS} s`),
      prefix: "rl:code:phone:gap",
    }),
    perPhoneHour: new Ratelimit({ ...base, limiter: Ratelimit.slidingWindow(5, "1 h"), prefix: "rl:code:phone:1h" }),
    perIpHour: new Ratelimit({
      ...base,
      limiter: Ratelimit.slidingWindow(config.LOGIN_CODE_SENDS_PER_IP_HOUR, "1 h"),
      prefix: "rl:code:ip:1h",
    }),
  };
}

function limiters(deps: Deps): LoginLimiters {
  return deps.isolate.loginLimiters;
}

function randomCode(): string {
  // Rejection sampling keeps the 6 digits uniform (2^32 is not a multiple of 10^6).
  const buf = new Uint32Array(1);
  for (;;) {
    crypto.getRandomValues(buf);
    const v = buf[0] as number;
    if (v < 4_294_000_000) return String(v % 1_000_000).padStart(6, "0");
  }
}

function randomNick(): string {
  const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  const bytes = crypto.getRandomValues(new Uint8Array(10));
  let out = "user_";
  for (const b of bytes) out += alphabet[b % alphabet.length];
  return out;
}

export async function sendLoginCode(deps: Deps, phone: string, ip: string): Promise<SendCodeResult> {
  const l = limiters(deps);
  // Address first: a flood from one address must not burn the victims' per-phone budgets.
  for (const [limiter, id] of [
    [l.perIpHour, ip],
    [l.perPhoneMinute, phone],
    [l.perPhoneHour, phone],
  ] as const) {
    // In braces: a sliding window's script reads this window's key and the last one, which must
    // share a hash tag to be one slot on a clustered Redis.
    const res = await limiter.limit(`{${id}}`);
    if (!res.success) {
      const retryAfterSeconds = Math.max(1, Math.ceil((res.reset - deps.clock.now()) / 1000));
      return {
        ok: false,
        reason: "RATE_LIMITED",
        retryAfterSeconds,
        message: `too many codes requested; retry in ${retryAfterSeconds} s`,
      };
    }
  }
  const code = randomCode();
  const key = keys.loginCode(phone);
  const tx = deps.redis.multi();
  tx.del(key);
  tx.hset(key, { code, tries: 0 });
  tx.expire(key, deps.config.LOGIN_CODE_TTL_SECONDS);
  await tx.exec();
  try {
    await deps.sms.sendLoginCode(phone, code);
  } catch (err) {
    // An undeliverable code must not linger as a valid secret.
    await deps.redis.del(key);
    deps.log.warn("sms delivery failed", { err });
    return { ok: false, reason: "UNAVAILABLE", message: "could not send the code; try again later" };
  }
  return { ok: true };
}

export async function loginWithCode(deps: Deps, phone: string, code: string): Promise<LoginResult> {
  const key = keys.loginCode(phone);
  const scripts = scriptsFor(deps.redis);
  const stored = await deps.redis.hget<string | number>(key, "code");
  if (stored === null || stored === undefined)
    return { ok: false, reason: "BAD_CODE", message: "code expired or not requested" };
  // The SDK JSON-parses numeric strings ("012345" stays a string, "123456" becomes a number).
  const expected = String(stored).padStart(6, "0");
  if (!timingSafeEqual(expected, code)) {
    const left = await scripts.loginCodeMiss.exec([key], [String(deps.config.LOGIN_CODE_MAX_ATTEMPTS)]);
    if (left <= 0)
      return { ok: false, reason: "BAD_CODE", message: "wrong code; too many attempts, request a new code" };
    return { ok: false, reason: "BAD_CODE", message: `wrong code; ${left} attempt(s) left` };
  }
  // The user's row is looked up while the code is consumed (one round trip for both; only after
  // the code matched, so a wrong guess costs no query); a refused consumption discards the row.
  const [consumed, existing] = await Promise.all([
    scripts.loginCodeConsume.exec([key], [expected]),
    findUser(deps, phone),
  ]);
  if (consumed !== 1) {
    return { ok: false, reason: "BAD_CODE", message: "code expired or already used" };
  }
  const { user, created } = existing ? { user: existing, created: false } : await createUser(deps, phone);
  const sessions = deps.isolate.sessions;
  const token = await createSession(deps.redis, user, deps.config.SESSION_TTL_SECONDS, sessions.keys, deps.clock.now());
  // This isolate wrote the record just now: it need not confirm it (the client's next call is warm).
  const claims = await sessions.keys.verify(token, deps.clock.now());
  if (claims) sessions.remember(deps, token, claims);
  return { ok: true, token, user, created };
}

async function findUser(deps: Deps, phone: string): Promise<SessionUser | undefined> {
  const row = (await deps.db.execute("SELECT id, nick_name, icon FROM tb_user WHERE phone = ?", [phone])).rows[0] as
    | { id: string | number; nick_name: string; icon: string }
    | undefined;
  return row ? { id: Number(row.id), nickName: row.nick_name, icon: row.icon } : undefined;
}

/**
 * Race-safe registration: the UNIQUE(phone) index decides. A row inserted here is known without
 * reading it back (its id, our nickname, the schema's empty icon); a concurrent duplicate (nothing
 * inserted) is read.
 */
async function createUser(deps: Deps, phone: string): Promise<{ user: SessionUser; created: boolean }> {
  const nickName = randomNick();
  const ins = await deps.db.execute("INSERT IGNORE INTO tb_user (phone, nick_name) VALUES (?, ?)", [phone, nickName]);
  if (ins.rowsAffected === 1) return { user: { id: Number(ins.insertId), nickName, icon: "" }, created: true };
  const user = await findUser(deps, phone);
  if (!user) throw new Error("user row missing right after insert");
  return { user, created: false };
}

/** Ends the session everywhere: dead in this isolate now, in every other within SESSION_TRUST_MS. */
export async function logout(deps: Deps, token: string): Promise<void> {
  await deps.isolate.sessions.revoke(deps, token);
}

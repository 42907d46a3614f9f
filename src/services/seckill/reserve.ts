/**
 * The seckill reservation: auth'd user → isolate sold-out memo → one Redis round trip (the
 * reserve-stock script, which also writes the outbox entry) → order id to the caller at once. The
 * writer is told to drain the shop's outbox in a batched background step (pipeline.ts); if that
 * is lost, the next window's drain or the sweep job finds the entry: a reservation always ends as
 * exactly one order or one release.
 */
import type { Deps } from "../../deps.ts";
import { keys } from "../../redis/keys.ts";
import { serviceDay } from "../../util/time.ts";
import { bucketKeysFor, type SeckillConfig } from "./config.ts";
import { DAY_MS, encodeRules, ruleKeys, ruleMessage, type RuleSubject } from "./rules.ts";
import { refillHome } from "./moves.ts";
import { addressLimitIn, homeOf, ShardUnavailable, shardCountOf, shardsOf } from "./shards.ts";
import { OrderStatus, type Reservation } from "./types.ts";
import { scriptsFor } from "../../redis/scripts.ts";
import { DependencyUnavailableError, isRedisFailure } from "../../resilience.ts";

export type ReserveResult =
  | { ok: true; orderId: string }
  | { ok: false; reason: "NOT_FOUND" | "NOT_STARTED" | "ENDED" | "SOLD_OUT" | "LIMIT_REACHED"; message: string }
  /** `orderId`: the order the buyer already holds, when known (memo, or MySQL once written). */
  | { ok: false; reason: "DUPLICATE_ORDER"; message: string; orderId: string | null }
  | { ok: false; reason: "RATE_LIMITED"; message: string; retryAfterMs: number }
  /**
   * The reservation's reply was lost and so was the check after it: the unit may be held. The
   * route answers 503 OUTCOME_UNKNOWN with Retry-After; a retry learns the order (DUPLICATE_ORDER
   * with its id once MySQL has it) or reserves normally if nothing happened.
   */
  | { ok: false; reason: "OUTCOME_UNKNOWN"; message: string; retryAfterMs: number };

/** What an isolate can answer from memory (never an unknown outcome: that needs a lost reply). */
export type MemoryAnswer = Exclude<ReserveResult, { reason: "OUTCOME_UNKNOWN" }>;

/** How long a fenced attempt's order id stays refused, ms: far beyond any delay in flight. */
export const FENCE_TTL_MS = 10 * 60_000;

/** Keys of one reservation call, in the order reserve-stock.lua documents. */
export function reserveKeys(cfg: SeckillConfig, userId: number, ip: string, day: string, orderId: string): string[] {
  const { shopId, voucherId } = cfg;
  return [
    keys.seckill.meta(shopId, voucherId),
    keys.seckill.buyers(shopId, voucherId),
    keys.seckill.outbox(shopId),
    keys.seckill.outboxDue(shopId),
    keys.seckill.userLog(shopId, voucherId, userId),
    keys.seckill.ipLog(shopId, voucherId, ip),
    keys.seckill.daily(shopId, userId, day),
    // Read-only unless this attempt's reply is lost (settleLostReply): one EXISTS in the script.
    keys.seckill.fence(shopId, orderId),
    // The voucher's purchase-rule logs (none without rules: the classic call is unchanged).
    ...ruleKeys(cfg, userId),
    ...bucketKeysFor(cfg, userId),
  ];
}

/** ARGV of one reservation call, in the order reserve-stock.lua documents. */
export function reserveArgs(
  c: Pick<
    Deps["config"],
    | "SECKILL_USER_LIMIT"
    | "SECKILL_USER_WINDOW_MS"
    | "SECKILL_IP_LIMIT"
    | "SECKILL_IP_WINDOW_MS"
    | "PURCHASE_RULE_MAX_DAYS"
  >,
  r: Reservation,
  cfg?: RuleSubject & Partial<Pick<SeckillConfig, "shards">>,
): string[] {
  const args = [
    String(r.userId),
    r.orderId,
    String(r.reservedAt),
    String(c.SECKILL_USER_LIMIT),
    String(c.SECKILL_USER_WINDOW_MS),
    // A sharded voucher's home shard checks its part of the address limit (shards.ts addressLimitIn).
    String(addressLimitIn(c.SECKILL_IP_LIMIT, cfg ? shardCountOf(cfg) : 0, r.shard ?? 0)),
    String(c.SECKILL_IP_WINDOW_MS),
    JSON.stringify(r),
    // The daily counter outlives its day by one, so a release on the next day still finds it.
    String(2 * 86400),
  ];
  // Purchase rules (the script checks they are the meta's, so the logs reserveKeys passed are
  // the right ones) and how far back a log is kept, ms. Nothing for a voucher without rules.
  const rules = cfg?.purchaseRules ?? [];
  if (rules.length > 0) args.push(encodeRules(rules), String(c.PURCHASE_RULE_MAX_DAYS * DAY_MS));
  return args;
}

const messages = {
  NOT_FOUND: "voucher not found",
  NOT_STARTED: "the sale has not started",
  ENDED: "the sale has ended",
  SOLD_OUT: "sold out",
  DUPLICATE_ORDER: "one order per user",
  LIMIT_REACHED: "daily purchase limit reached for this shop",
} as const;

/**
 * What this isolate can answer without Redis, synchronously (reserve's first step, and the fast
 * lane's): a buyer it gave a unit moments ago (a retry after a lost reply) learns their order; a
 * voucher Redis called sold out within SOLD_OUT_MEMO_MS is sold out; a user or address Redis
 * rate-limited, or a voucher whose admission budget for this second is spent, is refused
 * (admission.ts; `ipOf` is called only when an address block may apply). Undefined: ask Redis.
 */
export function answerFromMemory(
  deps: Pick<Deps, "isolate" | "clock">,
  voucherId: number,
  userId: number,
  ipOf: () => string | undefined,
): MemoryAnswer | undefined {
  const memory = deps.isolate.seckill;
  const now = deps.clock.now();
  const held = memory.heldBy(voucherId, userId, now);
  if (held !== undefined)
    return { ok: false, reason: "DUPLICATE_ORDER", message: messages.DUPLICATE_ORDER, orderId: held };
  if (memory.isSoldOutFor(voucherId, userId, now)) return { ok: false, reason: "SOLD_OUT", message: messages.SOLD_OUT };
  return deps.isolate.seckillAdmission.refusedFromMemory(now, voucherId, userId, ipOf);
}

export async function reserve(
  deps: Deps,
  input: { voucherId: number; userId: number; ip: string },
): Promise<ReserveResult> {
  const fromMemory = answerFromMemory(deps, input.voucherId, input.userId, () => input.ip);
  if (fromMemory) return fromMemory;
  const memory = deps.isolate.seckill;
  const now = deps.clock.now();
  const remember = (id: string) => memory.rememberHolder(input.voucherId, input.userId, id, now);
  // A voucher config not in memory is a miss the caller's address pays for (http/address-window.ts),
  // before any I/O: probing unknown voucher ids is refused from memory past the budget.
  const configs = deps.isolate.caches.seckill;
  if (!configs.inMemory(input.voucherId)) {
    const wait = deps.isolate.missMeter.refusedFor(input.ip, now);
    if (wait > 0)
      return {
        ok: false,
        reason: "RATE_LIMITED",
        message: "too many attempts on unknown vouchers from this address",
        retryAfterMs: wait,
      };
  }
  const cfg = await configs.get(deps, input.voucherId);
  if (!cfg) {
    deps.isolate.missMeter.count(input.ip, now);
    return { ok: false, reason: "NOT_FOUND", message: messages.NOT_FOUND };
  }
  // Window checks the isolate can answer from the cached config, without Redis.
  if (now < cfg.beginMs) return { ok: false, reason: "NOT_STARTED", message: messages.NOT_STARTED };
  if (now >= cfg.endMs) return { ok: false, reason: "ENDED", message: messages.ENDED };

  // The buyer's home database (shards.ts): the main one for an unsharded voucher, else the shard
  // every attempt, limit and release of this buyer for this voucher goes to.
  const sharded = shardCountOf(cfg) > 0;
  let home: { shard: number; redis: Deps["redis"] };
  try {
    home = homeOf(deps, cfg, input.userId);
  } catch (err) {
    if (err instanceof ShardUnavailable) throw new DependencyUnavailableError("redis", "open", 1000, err);
    throw err;
  }

  // The global admission limit (admission.ts): at most R attempts per second reach Redis — per
  // shard database for a sharded voucher (each database has its own command budget).
  const admit = () =>
    deps.isolate.seckillAdmission.admit(
      { redis: home.redis, clock: deps.clock, runtime: deps.runtime },
      cfg.voucherId,
      sharded ? home.shard : undefined,
    );
  const notAdmitted = await admit();
  if (notAdmitted) return notAdmitted;

  const orderId = (await deps.isolate.ids.next(deps)).toString();
  const reservation: Reservation = {
    orderId,
    userId: input.userId,
    voucherId: cfg.voucherId,
    shopId: cfg.shopId,
    reservedAt: now,
    amount: cfg.payValue,
    ...(sharded ? { shard: home.shard } : {}),
  };
  const c = deps.config;
  const day = serviceDay(now, c.SERVICE_TIME_ZONE);
  const rKeys = reserveKeys(cfg, input.userId, input.ip, day, orderId);
  const rArgs = reserveArgs(c, reservation, cfg);
  // One EVALSHA, sharing its round trip with the other reservations of this event-loop turn
  // (where the runtime allows it: redis/script-batch.ts).
  const attempt = async (): Promise<[number, number, number] | ReserveResult> => {
    try {
      return await deps.isolate.reserveBatch.exec(home.redis, rKeys, rArgs);
    } catch (err) {
      if (!mayHaveRun(err)) throw err;
      return await settleLostReply(deps, cfg, reservation, home.redis, remember, err);
    }
  };
  let reply = await attempt();
  if (!Array.isArray(reply)) return reply;
  // The home shard is dry: bring stock from the others (moves.ts) and try there again, until a
  // refill finds every other shard empty. Dry buyers of one isolate share each refill (where the
  // runtime allows it) and only as many of them retry as refills brought units ("tickets"): a
  // crowd at sell-out costs one refill, not a retry per buyer per round. A ticket stands for a unit
  // at home: a dry buyer takes one whenever there is one (units may have arrived while its own
  // attempt was in flight), and a retry that did not take a unit (the buyer already holds one, a
  // limit, an error) gives it back — SOLD_OUT alone uses it up (someone else took that unit).
  // SOLD_OUT is final, and remembered by the isolate, only when this buyer's refill brought
  // nothing and no refill or ticketed retry of this isolate is still in flight.
  let soldOutFinal = true;
  if (sharded && reply[0] === 4) {
    const first = reply;
    const afterDry = async (): Promise<{ answer: ReserveResult } | { reply: typeof first; final: boolean }> => {
      let reply = first;
      const gate = refillGate(deps, `${cfg.voucherId}:${home.shard}`);
      const deadline = deps.clock.now() + REFILL_WAIT_MS;
      let refills = 0;
      while (refills < MAX_REFILLS) {
        if (gate.tickets <= 0) {
          if (gate.retrying > 0 || (gate.inflight > 0 && !deps.runtime.sharesIo)) {
            // A ticketed retry may give its ticket back, or (workerd) another request's refill is
            // bringing units home and its I/O is not this request's to await (src/runtime.ts): look
            // again shortly on a timer of our own.
            if (deps.clock.now() >= deadline) break;
            await new Promise((r) => setTimeout(r, REFILL_POLL_MS));
            continue;
          }
          const before = gate.epoch;
          refills++;
          await sharedRefill(deps, cfg, home.shard, gate);
          if (gate.tickets <= 0) {
            if (gate.epoch === before && gate.inflight === 0 && gate.retrying === 0) return { reply, final: true };
            continue; // the units went to earlier waiters: see what their retries leave
          }
        }
        gate.tickets--;
        gate.retrying++;
        let used = false;
        try {
          // The retry is one more command on the home shard: it passes the shard's admission gate
          // like any attempt.
          const again = await admit();
          if (again) return { answer: again };
          const next = await attempt();
          if (!Array.isArray(next)) {
            used = next.ok;
            return { answer: next };
          }
          reply = next;
          used = reply[0] === 0 || reply[0] === 4;
          if (reply[0] === 0) {
            // Announced here, so that a buyer who went away meanwhile still has the order drained soon.
            announce(deps, reservation);
            remember(orderId);
            return { answer: { ok: true, orderId } };
          }
          if (reply[0] !== 4) return { reply, final: false };
        } finally {
          gate.retrying--;
          if (!used) gate.tickets++;
        }
      }
      return { reply, final: false };
    };
    // Where a request is cancelled when its client goes (workerd), a cancelled request's awaits
    // never resume, so a refill or retry it had in flight would hold the gate's counters (and a
    // ticket) for ever: the dry path runs in the request's waitUntil, which outlives the client.
    const dry = afterDry();
    if (!deps.runtime.sharesIo) deps.waitUntil(dry.then(noop, noop));
    const settled = await dry;
    if ("answer" in settled) return settled.answer;
    reply = settled.reply;
    soldOutFinal = settled.final;
  }
  const [code, a, b] = reply;
  switch (code) {
    case 0:
      announce(deps, reservation);
      remember(orderId);
      return { ok: true, orderId };
    case 1:
      return { ok: false, reason: "NOT_FOUND", message: messages.NOT_FOUND };
    case 2:
      return { ok: false, reason: "NOT_STARTED", message: messages.NOT_STARTED };
    case 3:
      return { ok: false, reason: "ENDED", message: messages.ENDED };
    case 4:
      // Unsharded: the voucher is sold out. Sharded: every shard was empty when asked.
      if (soldOutFinal && memory.markSoldOut(input.voucherId, now)) listSoldOutBuyers(deps, cfg);
      return { ok: false, reason: "SOLD_OUT", message: messages.SOLD_OUT };
    case 5: {
      // Another isolate (or an earlier life of this one) gave this buyer the unit: MySQL knows the
      // order once the writer has it (about a second after the reservation); until then the id is
      // not known here.
      const orderId = await heldOrderId(deps, cfg.voucherId, input.userId);
      if (orderId) remember(orderId);
      return { ok: false, reason: "DUPLICATE_ORDER", message: messages.DUPLICATE_ORDER, orderId };
    }
    case 6:
      deps.isolate.seckillAdmission.rememberBlock(cfg.voucherId, input.userId, input.ip, b, now + a);
      return {
        ok: false,
        reason: "RATE_LIMITED",
        message: b === 2 ? "too many attempts from this address" : "too many attempts",
        retryAfterMs: a,
      };
    case 7:
      // b = 0: the daily shop limit; b = i: the voucher's purchase rule i (1-based, canonical order).
      return { ok: false, reason: "LIMIT_REACHED", message: b === 0 ? messages.LIMIT_REACHED : ruleMessage(cfg, b) };
    case 8:
      // Only a late execution of a settled attempt sees this, and its caller is gone.
      throw new Error(`reserve-stock.lua: order id ${orderId} is fenced`);
    default:
      throw new Error(`reserve-stock.lua returned unknown code ${code}`);
  }
}

const noop = () => {};

/** Refills one attempt may wait for: each halves what the other shards hold, so ~log2(stock) rounds drain them. */
const MAX_REFILLS = 32;
/** How often a dry buyer looks again while a ticketed retry or (workerd) another request's refill runs, ms. */
const REFILL_POLL_MS = 5;
/**
 * How long one attempt may wait, in all, for other requests' retries and refills, ms: each is a
 * Redis round trip or a few, bounded by REDIS_TIMEOUT_MS; past this the buyer is told SOLD_OUT
 * (not remembered as final).
 */
const REFILL_WAIT_MS = 10_000;

/** A home shard's refills in this isolate (isolate.seckillRefills). */
export interface RefillGate {
  /** Units refills brought to the shard from this isolate, ever: a dry buyer compares it with what it saw. */
  epoch: number;
  /** Units refills brought that no retry has used yet (a retry that took none gives its ticket back). */
  tickets: number;
  /** Retries holding a ticket, in flight: a dry buyer without a ticket waits for them before SOLD_OUT is final. */
  retrying: number;
  running: Promise<number> | undefined;
  /** Refills of this isolate in flight (on workerd one per request that started one). */
  inflight: number;
}

function refillGate(deps: Deps, key: string): RefillGate {
  let g = deps.isolate.seckillRefills.get(key);
  if (!g) {
    g = { epoch: 0, tickets: 0, retrying: 0, running: undefined, inflight: 0 };
    deps.isolate.seckillRefills.set(key, g);
  }
  return g;
}

/**
 * One refill of `home` at a time per isolate and voucher where requests may share I/O (Bun,
 * Deno): concurrent dry buyers join it. On workerd each request refills for itself (src/runtime.ts).
 */
async function sharedRefill(deps: Deps, cfg: SeckillConfig, home: number, gate: RefillGate): Promise<void> {
  const run = async () => {
    gate.inflight++;
    try {
      const moved = await refillHome(deps, cfg, home, deps.isolate.seckillMoves);
      gate.epoch += moved;
      gate.tickets += moved;
      return moved;
    } finally {
      gate.inflight--;
    }
  };
  if (!deps.runtime.sharesIo) {
    await run();
    return;
  }
  gate.running ??= run().finally(() => {
    gate.running = undefined;
  });
  await gate.running;
}

/**
 * The outbox entry is written; what remains (index entry, the shop's drain for this window) is
 * batched across this isolate's buyers and never fails the reservation.
 */
function announce(deps: Deps, r: Reservation): void {
  deps.waitUntil(deps.isolate.orderGroups.add(deps, r));
}

/**
 * Could a failed reserve call have run in Redis? A timeout, a cut connection or a 5xx: yes (the
 * request reached, or may still reach, Upstash). A breaker that refused the call (nothing was
 * sent) or a command error Redis answered (the script checks before it writes): no.
 */
function mayHaveRun(err: unknown): boolean {
  if (err instanceof DependencyUnavailableError) return err.reason !== "open";
  return isRedisFailure(err);
}

/**
 * A reservation whose reply was lost (architecture.md "A timeout is ambiguous"): the buyer must
 * not be told "nothing reserved" while they may hold a unit. One more command in the same request
 * (lua/reserve-fence.lua) learns the truth and makes it final:
 *   - our order id is in the outbox → reserved: the order id, announced and indexed like any other;
 *   - the buyer is a buyer but our id is not in the outbox: ours was already written to MySQL
 *     (the writer drained it while the reply was late) → the order id, as a success; or an
 *     earlier order → DUPLICATE_ORDER with the order MySQL has (null while queued, as for any duplicate);
 *   - neither → fenced: reserve-stock refuses this order id if it ever arrives late, so the
 *     fail-closed 503 ("nothing reserved") is true.
 * If that command fails too, nothing is known: 503 OUTCOME_UNKNOWN, and the reservation is
 * announced anyway, so that if the script did run, its order is drained and indexed within a
 * window (an announcement for nothing costs one empty drain).
 */
async function settleLostReply(
  deps: Deps,
  cfg: SeckillConfig,
  r: Reservation,
  redis: Deps["redis"],
  remember: (id: string) => void,
  cause: unknown,
): Promise<ReserveResult> {
  const { shopId, voucherId } = cfg;
  let settled: number;
  try {
    settled = await scriptsFor(redis).reserveFence.exec(
      [keys.seckill.outbox(shopId), keys.seckill.buyers(shopId, voucherId), keys.seckill.fence(shopId, r.orderId)],
      [r.orderId, String(r.userId), String(FENCE_TTL_MS)],
    );
  } catch (err) {
    deps.log.warn("seckill reservation outcome unknown (reply and check both lost)", {
      voucherId,
      orderId: r.orderId,
      err,
    });
    announce(deps, r);
    return {
      ok: false,
      reason: "OUTCOME_UNKNOWN",
      message: "the reservation's outcome is not known yet: retry to learn your order",
      retryAfterMs: 1000,
    };
  }
  const counts = deps.isolate.seckillLostReplies;
  if (settled === 0) counts.fenced++;
  if (settled === 1) {
    counts.reserved++;
    announce(deps, r);
    remember(r.orderId);
    return { ok: true, orderId: r.orderId };
  }
  if (settled === 2) {
    const held = await heldOrderId(deps, voucherId, r.userId);
    if (held) remember(held);
    // Ours, already drained from the outbox into MySQL while the reply was late: this attempt's order.
    if (held === r.orderId) {
      counts.reserved++;
      return { ok: true, orderId: held };
    }
    counts.buyer++;
    return { ok: false, reason: "DUPLICATE_ORDER", message: messages.DUPLICATE_ORDER, orderId: held };
  }
  // Fenced: nothing was reserved and nothing will be. The caller's error path (503) is the truth.
  throw cause;
}

/** The order holding a unit of `voucherId` for `userId`, from MySQL (idx_voucher_user); null while queued. */
async function heldOrderId(deps: Deps, voucherId: number, userId: number): Promise<string | null> {
  const row = (
    await deps.db.execute(
      "SELECT id FROM tb_voucher_order WHERE voucher_id = ? AND user_id = ? AND status IN (?, ?, ?) ORDER BY id DESC LIMIT 1",
      [voucherId, userId, OrderStatus.unpaid, OrderStatus.paid, OrderStatus.used],
    )
  ).rows[0] as { id: string | number } | undefined;
  return row ? String(row.id) : null;
}

/**
 * The voucher's buyers (every database holding part of it), handed to the sold-out memo in the
 * background: one SMEMBERS per database, once per isolate and sell-out. On workerd it runs in the
 * waitUntil of the request that saw SOLD_OUT, and other requests only read the result.
 */
function listSoldOutBuyers(deps: Deps, cfg: SeckillConfig): void {
  const key = keys.seckill.buyers(cfg.shopId, cfg.voucherId);
  const memory = deps.isolate.seckill;
  const listed = Promise.all(shardsOf(deps, cfg).map(({ redis }) => redis.smembers(key))).then(
    (sets) => memory.soldOutBuyers(cfg.voucherId, sets.flat() as (string | number)[]),
    (err: unknown) => {
      memory.soldOutListFailed(cfg.voucherId);
      throw err;
    },
  );
  deps.waitUntil(listed);
}

/**
 * Seckill admission: at most R attempts per second per voucher reach Redis, across all isolates,
 * and callers Redis has rate-limited are answered from the isolate until their window ends; both
 * refusals (429 + Retry-After) cost no Redis call.
 * Each isolate leases tokens of the current epoch second in chunks (lua/seckill-admission.lua) and
 * spends them locally: about a tenth of a second of its demand, never more than R/10, so the lease
 * overhead stays ≤ ~10 commands per second per busy isolate and voucher.
 * Invariants: tokens die with their second and a lease answered late is void, so unspent tokens
 * are lost admissions, never extra ones; a total across vouchers, floor(REDIS_COMMANDS_PER_SECOND ×
 * SECKILL_ADMISSION_SHARE), keeps their sum within the database's budget.
 * Why leases and not a counter per attempt: docs/modules.md "services/seckill/admission.ts",
 * docs/decisions/limits.md.
 */
import { LRUCache } from "lru-cache";
import type { Deps } from "../../deps.ts";
import type { Config } from "../../env.ts";
import { keys } from "../../redis/keys.ts";
import { scriptsFor } from "../../redis/scripts.ts";
import type { MemoryAnswer } from "./reserve.ts";

export interface AdmissionLimits {
  /** Attempts per second per voucher that may reach Redis. */
  perVoucher: number;
  /** Attempts + leases per second across all vouchers. */
  total: number;
}

type AdmissionConfig = Pick<
  Config,
  "REDIS_COMMANDS_PER_SECOND" | "SECKILL_ADMISSION_SHARE" | "SECKILL_ADMISSION_PER_SECOND"
>;

/** The limits config asks for; null when admission is off (SECKILL_ADMISSION_PER_SECOND=0). */
export function admissionLimits(c: AdmissionConfig): AdmissionLimits | null {
  if (c.SECKILL_ADMISSION_PER_SECOND === 0) return null;
  // At least 2: a lease takes one unit of the total for itself.
  const total = Math.max(2, Math.floor(c.REDIS_COMMANDS_PER_SECOND * c.SECKILL_ADMISSION_SHARE));
  return { perVoucher: Math.min(total - 1, c.SECKILL_ADMISSION_PER_SECOND ?? total), total };
}

/** Leases a busy isolate aims for per second and voucher (chunk ≈ demand / this). */
const LEASES_PER_SECOND = 10;
/** One isolate's chunk never exceeds perVoucher / this. */
const MAX_CHUNK_DIVISOR = 10;
/** Lifetime of the per-second counters in Redis, ms (only their own second reads them). */
const COUNTER_TTL_MS = 5_000;

/** One voucher's admission state in this isolate, for the second `second`. */
interface Gate {
  /** Epoch second (floor(ms / 1000)) the fields below describe. */
  second: number;
  /** Tokens leased for `second` and not yet spent. */
  tokens: number;
  /** Redis said the voucher's budget for `second` is spent: refuse until the next second. */
  spent: boolean;
  /** The lease in flight, shared by every caller waiting for a token. */
  lease: Promise<void> | undefined;
  /** Callers waiting for `lease`. */
  waiting: number;
  /** Attempts seen in `second`, and in the second before (chunk sizing). */
  seen: number;
  seenBefore: number;
}

/** What the operators' console shows of this isolate's admission memory (SeckillAdmission.snapshot). */
export interface AdmissionSnapshot {
  /** Null when admission is off. */
  limits: AdmissionLimits | null;
  /** Counters since the isolate started: leases sent, tokens granted, attempts refused from memory. */
  stats: { leases: number; granted: number; refused: number; blockedFromMemory: number };
  /** Vouchers with a gate (at most 1,000); `gates` lists the most recently used `top` of them. */
  vouchers: number;
  gates: { voucherId: number; tokens: number; spent: boolean; seen: number; leasing: boolean }[];
  /** Rate-limit blocks remembered (at most 100,000), and of those the ones not yet over at `now`. */
  blocks: number;
  blocksActive: number;
}

const MESSAGES = {
  user: "too many attempts",
  ip: "too many attempts from this address",
  admission: "too many buyers at this moment; retry in a second",
} as const;

/**
 * This isolate's admission memory (deps.isolate.seckillAdmission): gates by voucher (LRU, 1,000
 * vouchers; each a few numbers, valid for one second) and the rate-limit blocks Redis reported
 * (LRU, 100,000 entries "voucherId:u:userId" / "voucherId:a:ip" → epoch ms until which the caller
 * is refused; never longer than the limit's window, since reserve-stock.lua's retryAfterMs is
 * bounded by it). Expiry is checked against deps.clock by the reader.
 */
export class SeckillAdmission {
  readonly limits: AdmissionLimits | null;
  /** Gates by "voucherId" (unsharded) or "voucherId:shard" (each shard database its own budget). */
  readonly gates = new LRUCache<string, Gate>({ max: 1_000 });
  readonly blocks = new LRUCache<string, number>({ max: 100_000 });
  /** Leases sent, tokens granted, attempts refused from memory (admission, rate-limit blocks). */
  readonly stats = { leases: 0, granted: 0, refused: 0, blockedFromMemory: 0 };

  constructor(config: AdmissionConfig) {
    this.limits = admissionLimits(config);
  }

  /**
   * Read-only view for the operators' console, from memory (no Redis). A gate of an earlier second
   * shows 0 tokens and not spent (that is what `admit` would make of it). Cost: one pass over the
   * remembered blocks (≤ 100,000 numbers) and the first `top` gates; nothing is touched (LRU
   * iteration does not change recency), so reading it changes no admission decision.
   */
  snapshot(now: number, top = 20): AdmissionSnapshot {
    const second = Math.floor(now / 1000);
    const gates: AdmissionSnapshot["gates"] = [];
    for (const [key, g] of this.gates.entries()) {
      if (gates.length >= top) break;
      const current = g.second === second;
      const [voucherId, shard] = key.split(":").map(Number) as [number, number | undefined];
      gates.push({
        voucherId,
        ...(shard === undefined ? {} : { shard }),
        tokens: current ? g.tokens : 0,
        spent: current && g.spent,
        seen: current ? g.seen : 0,
        leasing: g.lease !== undefined,
      });
    }
    let blocksActive = 0;
    for (const until of this.blocks.values()) if (until > now) blocksActive++;
    return {
      limits: this.limits,
      stats: { ...this.stats },
      vouchers: this.gates.size,
      gates,
      blocks: this.blocks.size,
      blocksActive,
    };
  }

  private gateOf(key: string, second: number): Gate {
    let g = this.gates.get(key);
    if (!g) {
      g = { second, tokens: 0, spent: false, lease: undefined, waiting: 0, seen: 0, seenBefore: 0 };
      this.gates.set(key, g);
    } else if (g.second !== second) {
      // A new second: the old one's tokens and verdict are void (a clock step back also lands here).
      g.seenBefore = second === g.second + 1 ? g.seen : 0;
      g.second = second;
      g.tokens = 0;
      g.spent = false;
      g.seen = 0;
    }
    return g;
  }

  /**
   * What the isolate can refuse without Redis: a rate-limit block Redis reported for this user or
   * address, or a voucher whose admission budget for this second is spent. Synchronous and
   * allocation-free on the common (undefined) path; part of reserve.ts answerFromMemory.
   */
  refusedFromMemory(
    now: number,
    voucherId: number,
    userId: number,
    ipOf: () => string | undefined,
  ): MemoryAnswer | undefined {
    if (this.blocks.size > 0) {
      const user = this.blockedUntil(`${voucherId}:u:${userId}`, now);
      if (user !== undefined) return this.refuse(MESSAGES.user, user - now, true);
      const ip = ipOf();
      if (ip !== undefined) {
        const addr = this.blockedUntil(`${voucherId}:a:${ip}`, now);
        if (addr !== undefined) return this.refuse(MESSAGES.ip, addr - now, true);
      }
    }
    // (A sharded voucher's gates are per shard; admit() refuses from them without I/O as well.)
    const g = this.gates.peek(String(voucherId));
    const second = Math.floor(now / 1000);
    if (g?.spent && g.tokens === 0 && g.second === second)
      return this.refuse(MESSAGES.admission, (second + 1) * 1000 - now, false);
    return undefined;
  }

  private blockedUntil(key: string, now: number): number | undefined {
    const until = this.blocks.get(key);
    if (until === undefined) return undefined;
    if (until > now) return until;
    this.blocks.delete(key);
    return undefined;
  }

  private refuse(message: string, retryAfterMs: number, block: boolean): MemoryAnswer {
    if (block) this.stats.blockedFromMemory++;
    else this.stats.refused++;
    return { ok: false, reason: "RATE_LIMITED", message, retryAfterMs };
  }

  /** Remembers a RATE_LIMITED answer of reserve-stock.lua (`scope` 2 = the address, else the user). */
  rememberBlock(voucherId: number, userId: number, ip: string, scope: number, untilMs: number): void {
    this.blocks.set(scope === 2 ? `${voucherId}:a:${ip}` : `${voucherId}:u:${userId}`, untilMs);
  }

  /**
   * The gate: undefined when the attempt may go to Redis (a token was spent), or the refusal.
   * Waits for at most one lease round trip (shared by every caller of the turn) when the isolate
   * has no token and the second's budget is not known to be spent. A failed lease rejects like the
   * reserve command would (Redis is down for both).
   */
  async admit(
    deps: Pick<Deps, "redis" | "clock" | "runtime">,
    voucherId: number,
    shard?: number,
  ): Promise<MemoryAnswer | undefined> {
    const lim = this.limits;
    if (!lim) return undefined;
    let counted = false;
    for (;;) {
      const now = deps.clock.now();
      const second = Math.floor(now / 1000);
      const g = this.gateOf(shard === undefined ? String(voucherId) : `${voucherId}:${shard}`, second);
      if (!counted) {
        g.seen++;
        counted = true;
      }
      if (g.tokens > 0) {
        g.tokens--;
        return undefined;
      }
      if (g.spent) return this.refuse(MESSAGES.admission, (second + 1) * 1000 - now, false);
      if (!deps.runtime.sharesIo) {
        // workerd: a lease in flight is another request's and may not be awaited (src/runtime.ts).
        // This request leases for itself; what it is granted beyond its own token stays in the gate
        // for the next callers, who take it synchronously.
        await this.lease(deps, voucherId, g, second, lim, false);
        continue;
      }
      g.waiting++;
      try {
        g.lease ??= this.lease(deps, voucherId, g, second, lim, true);
        await g.lease;
      } finally {
        g.waiting--;
      }
    }
  }

  /** `shared`: the gate's one lease, joined by every waiting caller (Bun, Deno); else one caller's own. */
  private async lease(
    deps: Pick<Deps, "redis">,
    voucherId: number,
    g: Gate,
    second: number,
    lim: AdmissionLimits,
    shared: boolean,
  ): Promise<void> {
    try {
      // One turn, so the callers parsed in the same read of the sockets count in `waiting`.
      if (shared) await new Promise<void>((r) => setTimeout(r, 0));
      const maxChunk = Math.max(1, Math.ceil(lim.perVoucher / MAX_CHUNK_DIVISOR));
      const pace = Math.ceil(Math.max(g.seen, g.seenBefore) / LEASES_PER_SECOND);
      const want = Math.min(maxChunk, Math.max(1, shared ? g.waiting : 1, pace));
      this.stats.leases++;
      const [granted, left] = await scriptsFor(deps.redis).seckillAdmission.exec(
        [keys.seckill.admission(voucherId, second), keys.seckill.admissionTotal(second)],
        [String(want), String(lim.perVoucher), String(lim.total), String(COUNTER_TTL_MS)],
      );
      this.stats.granted += granted;
      // Granted for a second that has ended: void (they were counted in that second's budget).
      if (g.second !== second) return;
      g.tokens += granted;
      if (left <= 0) g.spent = true;
    } finally {
      // One shared lease per gate at a time (later callers join it), so this is always that lease.
      if (shared) g.lease = undefined;
    }
  }
}

/**
 * Order ids: 64-bit, time-ordered, unique across isolates, sent to clients as decimal strings.
 *
 * Layout (63 bits, so the value is a positive signed BIGINT):
 *   41 bits  milliseconds since 2024-01-01T00:00:00Z (good until 2093)
 *   10 bits  worker id (0..1023), leased in Redis so no two live isolates share one
 *   12 bits  sequence within the millisecond (4096 ids/ms per isolate)
 *
 * Clock going backwards (NTP step, VM migration): ids never go back. The generator keeps its own
 * last timestamp and keeps issuing from it (borrowing the next millisecond when a millisecond's
 * sequence is exhausted) until the wall clock catches up, instead of waiting or repeating ids.
 */
import type { RedisPort } from "../deps.ts";
import { keys } from "./keys.ts";
import { scriptsFor } from "./scripts.ts";

export const ID_EPOCH_MS = Date.UTC(2024, 0, 1);
const WORKER_BITS = 10n;
const SEQ_BITS = 12n;
const MAX_SEQ = (1 << Number(SEQ_BITS)) - 1;
export const MAX_WORKERS = 1 << Number(WORKER_BITS);

export class IdGenerator {
  private lastMs = -1;
  private lastWall = -1;
  private seq = 0;
  /** Times the wall clock was seen behind the last issued timestamp (observability). */
  backwardsEvents = 0;

  constructor(
    readonly workerId: number,
    private readonly now: () => number = Date.now,
  ) {
    if (!Number.isInteger(workerId) || workerId < 0 || workerId >= MAX_WORKERS) throw new Error(`worker id out of range: ${workerId}`);
  }

  next(): bigint {
    const wall = this.now() - ID_EPOCH_MS;
    if (wall < this.lastWall) this.backwardsEvents++;
    this.lastWall = wall;
    // Never behind the last issued timestamp (which may be ahead of the wall after borrowing).
    let ms = Math.max(wall, this.lastMs);
    if (ms === this.lastMs) {
      this.seq++;
      if (this.seq > MAX_SEQ) {
        // Sequence exhausted within one millisecond: move to the next one (stays monotonic).
        ms = this.lastMs + 1;
        this.seq = 0;
      }
    } else {
      this.seq = 0;
    }
    this.lastMs = ms;
    return (BigInt(ms) << (WORKER_BITS + SEQ_BITS)) | (BigInt(this.workerId) << SEQ_BITS) | BigInt(this.seq);
  }

  /** Milliseconds since the Unix epoch encoded in an id. */
  static timeOf(id: bigint): number {
    return Number(id >> (WORKER_BITS + SEQ_BITS)) + ID_EPOCH_MS;
  }
}

/**
 * Leases a worker id for this isolate: `SET idgen:worker:{n} owner NX EX ttl`, starting at a
 * random slot and probing onward. Only `NX` writes the key, so a slot another owner holds is never
 * taken over; renewal is the owner-only CAS in `IsolateIds` (lua/extend-lock.lua).
 */
export async function leaseWorkerId(redis: RedisPort, owner: string, ttlSeconds: number): Promise<number> {
  const start = Math.floor(Math.random() * MAX_WORKERS);
  // Probe in batches of 16 (one pipelined round trip each) until one slot is free.
  for (let base = 0; base < MAX_WORKERS; base += 16) {
    const slots = Array.from({ length: 16 }, (_, i) => (start + base + i) % MAX_WORKERS);
    const results = await Promise.all(slots.map((n) => redis.set(keys.idWorker(n), owner, { nx: true, ex: ttlSeconds })));
    const won = results.map((r, i) => (r === "OK" ? slots[i] : -1)).filter((n) => n !== undefined && n >= 0) as number[];
    const [first, ...extra] = won;
    // Give back any other slot this batch happened to take.
    if (extra.length > 0) await Promise.all(extra.map((n) => redis.del(keys.idWorker(n))));
    if (first !== undefined) return first;
  }
  throw new Error("no free id worker slot (1024 leased)");
}

/**
 * Rounds of renew-or-lease `next()` waits for before giving up. One round normally suffices; more
 * are needed only when Redis answers so slowly that the fresh proof has already run out on arrival.
 */
const MAX_PROOF_ROUNDS = 3;

/**
 * Per-isolate generator whose worker id is leased in Redis and renewed by the owner only.
 *
 * Invariant: an id is issued only while `now() < validUntil`, where
 *   validUntil = (time the last successful lease or renewal request was SENT) + TTL − margin
 * on this isolate's clock, in epoch ms. Redis starts the TTL when it executes the command, which is
 * after we sent it, so the key cannot expire — and so no other isolate can `SET NX` the slot — before
 * sentAt + TTL. Measuring from the answer instead would count the round trip (or a pause while the
 * request was in flight) as lease time we may not have. The margin (TTL/10: 6 min for the default
 * hour) absorbs clock-rate drift between us and Redis and clock skew between isolates: the next
 * owner's ids carry timestamps at least `margin − skew` after our last one, so ids never collide
 * even though both use the same 10 worker bits.
 *
 * Renewal is compare-and-set (lua/extend-lock.lua: PEXPIRE only if the key still holds our owner
 * token), so we can never take back a slot another isolate leased after ours ran out. It runs in the
 * background once half the TTL has passed since the last proof; past `validUntil`, `next()` waits
 * for it. If the CAS finds the slot gone or someone else's, the generator is dropped and a fresh slot
 * is leased before anything is issued. All callers share one in-flight renew/lease (no stampede).
 *
 * Not covered: ids whose timestamp the generator borrowed ahead of the wall clock (sequence
 * exhaustion, or the clock stepping back by more than the margin) can outrun `validUntil`.
 */
export class IsolateIds {
  private gen: IdGenerator | undefined;
  /** Epoch ms (injected clock): last instant at which the current lease is provably ours. */
  private validUntilMs = 0;
  /** Epoch ms: half the TTL after the last proof; from here on `next()` renews in the background. */
  private renewAfterMs = 0;
  /** The one in-flight renew-or-lease, shared by every caller (foreground and background). */
  private refreshing: Promise<void> | undefined;
  /** A background renewal in progress; its errors are caught and recorded, never left floating. */
  private background: Promise<void> | undefined;
  private leaseCount = 0;
  private renewalCount = 0;
  private lostCount = 0;
  private failureCount = 0;
  private lastFailure: unknown;
  private readonly owner = crypto.randomUUID();
  private readonly ttlMs: number;
  private readonly marginMs: number;

  /**
   * @param now         clock, epoch ms; the same clock stamps ids and times the lease (tests jump it)
   * @param ttlSeconds  worker-id lease time to live, whole seconds (it is sent as `EX`)
   */
  constructor(
    private readonly redis: RedisPort,
    private readonly now: () => number = Date.now,
    private readonly ttlSeconds = 3600,
  ) {
    if (!Number.isInteger(ttlSeconds) || ttlSeconds < 1) throw new Error(`id lease ttl must be whole seconds >= 1: ${ttlSeconds}`);
    this.ttlMs = ttlSeconds * 1000;
    this.marginMs = this.ttlMs / 10;
  }

  /** Worker id currently held, or undefined while none is (before the first lease, after a loss). */
  get workerId(): number | undefined {
    return this.gen?.workerId;
  }
  /** Epoch ms up to which the current lease is provably ours (0 when there is none). */
  get validUntil(): number {
    return this.gen ? this.validUntilMs : 0;
  }
  /** Slots leased (the first one, and one after each lost lease). */
  get leases(): number {
    return this.leaseCount;
  }
  /** Successful owner-only renewals. */
  get renewals(): number {
    return this.renewalCount;
  }
  /** Renewals that found the slot expired or owned by someone else (the generator was dropped). */
  get lostLeases(): number {
    return this.lostCount;
  }
  /** Background renewals that failed (e.g. Redis unreachable); retried on the next call. */
  get renewFailures(): number {
    return this.failureCount;
  }
  get lastRenewError(): unknown {
    return this.lastFailure;
  }
  /** The background renewal in flight, if any (resolves, never rejects): for shutdown and tests. */
  get renewing(): Promise<void> | undefined {
    return this.background;
  }

  async next(): Promise<bigint> {
    for (let round = 0; ; round++) {
      const gen = this.gen;
      const now = this.now();
      // Checked and issued synchronously: nothing can run between the proof check and the id.
      if (gen && now < this.validUntilMs) {
        if (now >= this.renewAfterMs) this.renewInBackground();
        return gen.next();
      }
      if (round === MAX_PROOF_ROUNDS) throw new Error("id worker lease could not be proven in time");
      // No lease, or it may have run out: wait for the shared renew-or-lease, then check again.
      await this.refresh();
    }
  }

  private renewInBackground(): void {
    if (this.refreshing) return; // one is already on its way
    const p: Promise<void> = this.refresh()
      .catch((err: unknown) => {
        // The lease stays valid until validUntil; the next call past renewAfter tries again.
        this.failureCount++;
        this.lastFailure = err;
      })
      .finally(() => {
        if (this.background === p) this.background = undefined;
      });
    this.background = p;
  }

  private refresh(): Promise<void> {
    if (!this.refreshing) {
      const p: Promise<void> = this.renewOrLease().finally(() => {
        if (this.refreshing === p) this.refreshing = undefined;
      });
      this.refreshing = p;
    }
    return this.refreshing;
  }

  /** One renew-or-lease round trip sequence: CAS renewal of the held slot, else lease a new one. */
  private async renewOrLease(): Promise<void> {
    const held = this.gen;
    if (held) {
      const sentAt = this.now();
      const extended = await scriptsFor(this.redis).extendLock.exec([keys.idWorker(held.workerId)], [this.owner, String(this.ttlMs)]);
      if (extended === 1) {
        this.proven(sentAt);
        this.renewalCount++;
        return;
      }
      // Expired and gone, or another isolate's now: stop issuing under this worker id at once.
      this.gen = undefined;
      this.validUntilMs = 0;
      this.lostCount++;
    }
    const sentAt = this.now(); // before the first probe, so the deadline is conservative
    const workerId = await leaseWorkerId(this.redis, this.owner, this.ttlSeconds);
    // Landing on the slot we just lost (it had expired, nobody took it): keep the old generator so
    // its monotonic state (last timestamp, sequence) rules out repeating our own earlier ids.
    this.gen = held?.workerId === workerId ? held : new IdGenerator(workerId, this.now);
    this.proven(sentAt);
    this.leaseCount++;
  }

  private proven(sentAt: number): void {
    this.validUntilMs = sentAt + this.ttlMs - this.marginMs;
    this.renewAfterMs = sentAt + this.ttlMs / 2;
  }
}

/** The isolate's id generator (one worker-id lease per isolate: deps.isolate.ids). */
export function idsFor(deps: { isolate: { ids: IsolateIds } }): IsolateIds {
  return deps.isolate.ids;
}

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
 * random slot and probing onward. Call `renew` well within the TTL (the isolate does it lazily).
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

/** Per-isolate generator with a lazily leased and renewed worker id. */
export class IsolateIds {
  private gen: IdGenerator | undefined;
  private leasing: Promise<IdGenerator> | undefined;
  private leasedAt = 0;
  private readonly owner = crypto.randomUUID();

  constructor(
    private readonly redis: RedisPort,
    private readonly now: () => number = Date.now,
    private readonly ttlSeconds = 3600,
  ) {}

  async next(): Promise<bigint> {
    const gen = this.gen ?? (await this.acquire());
    // Renew in the background at half the lease; a failure is retried on the next call.
    if (this.now() - this.leasedAt > (this.ttlSeconds * 1000) / 2) {
      this.leasedAt = this.now();
      void this.redis.set(keys.idWorker(gen.workerId), this.owner, { ex: this.ttlSeconds }).catch(() => {
        this.leasedAt = 0;
      });
    }
    return gen.next();
  }

  private async acquire(): Promise<IdGenerator> {
    this.leasing ??= (async () => {
      const id = await leaseWorkerId(this.redis, this.owner, this.ttlSeconds);
      this.gen = new IdGenerator(id, this.now);
      this.leasedAt = this.now();
      return this.gen;
    })().finally(() => {
      this.leasing = undefined;
    });
    return await this.leasing;
  }
}

const perIsolate = new WeakMap<RedisPort, IsolateIds>();

/** The isolate's id generator (one worker-id lease per Redis client, i.e. per isolate). */
export function idsFor(deps: { redis: RedisPort; clock: { now(): number } }): IsolateIds {
  let ids = perIsolate.get(deps.redis);
  if (!ids) {
    ids = new IsolateIds(deps.redis, () => deps.clock.now());
    perIsolate.set(deps.redis, ids);
  }
  return ids;
}

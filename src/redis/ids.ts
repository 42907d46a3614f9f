/**
 * Order ids (also payment and refund ids): 64-bit, roughly time-ordered, unique across every
 * isolate that ever lived, sent to clients as decimal strings.
 * Layout (63 bits, a positive signed BIGINT): 41 bits of milliseconds since 2024-01-01 at which the
 * block was drawn, 10 bits of block within that millisecond, 12 bits of sequence (4,096 ids).
 * The upper 51 bits are one block number handed out by lua/id-block.lua from one Redis counter
 * that only moves forward, so no two ids are ever equal. Nothing is leased: an isolate that dies,
 * or a draw whose reply is lost, burns block numbers (1,024 per millisecond).
 * Cost: one EVALSHA per 4,096 ids or per BLOCK_MAX_AGE_MS, drawn in the background before the block
 * runs out, so a warm isolate's reservation stays one Redis command.
 * Why: docs/decisions/ids-without-leases.md.
 */
import type { Deps, RedisPort } from "../deps.ts";
import { keys } from "./keys.ts";
import { scriptsFor } from "./scripts.ts";

export const ID_EPOCH_MS = Date.UTC(2024, 0, 1);
const SEQ_BITS = 12n;
const SUB_BITS = 10n;
export const IDS_PER_BLOCK = 1 << Number(SEQ_BITS);
/** A block is not used for new ids once this old, ms: an id's time is within this of its issue. */
export const BLOCK_MAX_AGE_MS = 60_000;
/** The next block is drawn in the background once this share of the current one is used (or of its age). */
const REFILL_AT = 0.75;

export class IdGenerator {
  /** Milliseconds since the Unix epoch encoded in an id (when its block was drawn). */
  static timeOf(id: bigint): number {
    return Number(id >> (SUB_BITS + SEQ_BITS)) + ID_EPOCH_MS;
  }
  /** The block an id belongs to (its upper 51 bits). */
  static blockOf(id: bigint): bigint {
    return id >> SEQ_BITS;
  }
}

interface Block {
  /** Block number B (lua/id-block.lua). */
  base: bigint;
  /** Next sequence number to hand out (0..IDS_PER_BLOCK). */
  used: number;
  /** Isolate clock when the draw was sent, epoch ms. */
  drawnAt: number;
}

export interface IdStats {
  /** Blocks drawn (successful id-block calls). */
  draws: number;
  /** Draws that failed or timed out (their block numbers, if drawn, are burnt). */
  drawFailures: number;
  /** Draws a request had to wait for (no block at hand). */
  foregroundDraws: number;
  /** Blocks dropped unused or part-used (a spare beside a fresh one, or aged out). */
  discarded: number;
  issued: number;
}

/**
 * The isolate's id source (deps.isolate.ids): the block in use, a spare drawn ahead, counters.
 *
 * Runtime rule (src/runtime.ts): where requests may share in-flight I/O, concurrent callers with no
 * block at hand join one draw (4,096 of them are served by it, the rest join the next); on workerd each such caller draws for itself (a few extra blocks
 * when a cold isolate meets a crowd — block numbers are free). Background draws go through the
 * calling request's `waitUntil` and no request awaits them: their block lands in memory, read
 * synchronously by whoever comes next.
 */
export class IsolateIds {
  private current: Block | undefined;
  private spare: Block | undefined;
  /** The one draw in flight that callers may join (only where `sharesIo`). */
  private joinable: Promise<Block> | undefined;
  /** A background draw in flight (for the spare); never awaited by a request. */
  private refilling = false;
  private lastFailure: unknown;
  readonly stats: IdStats = { draws: 0, drawFailures: 0, foregroundDraws: 0, discarded: 0, issued: 0 };
  private readonly sharesIo: boolean;
  private readonly maxAgeMs: number;

  /**
   * @param now   clock, epoch ms; stamps the draws (tests jump it)
   * @param opts  sharesIo: the runtime's capability; blockMaxAgeMs: see BLOCK_MAX_AGE_MS
   */
  constructor(
    private readonly redis: RedisPort,
    private readonly now: () => number = Date.now,
    opts: { sharesIo?: boolean; blockMaxAgeMs?: number } = {},
  ) {
    this.sharesIo = opts.sharesIo ?? true;
    this.maxAgeMs = opts.blockMaxAgeMs ?? BLOCK_MAX_AGE_MS;
  }

  get lastDrawError(): unknown {
    return this.lastFailure;
  }

  /**
   * The next id. Synchronous work when a block is at hand (no Redis); then, when the block is
   * three-quarters used or aged, a spare is drawn through `bg.waitUntil`. With no block at hand
   * the caller waits for one draw. Rejects only when that draw fails (Redis down or late).
   */
  async next(bg?: Pick<Deps, "waitUntil">): Promise<bigint> {
    const now = this.now();
    const id = this.take(now);
    if (id !== undefined) {
      if (bg) this.refillIfDue(bg, now);
      return id;
    }
    this.stats.foregroundDraws++;
    for (;;) {
      const block = await this.drawForeground();
      // Every joiner of one draw takes the next number of its block while it lasts (4,096); one it
      // cannot serve takes from a block that landed meanwhile, or joins the next draw.
      const mine = this.issue(block) ?? this.take(this.now());
      this.install(block);
      if (mine !== undefined) return mine;
    }
  }

  /** An id from the block in use or the spare, if either is usable now. */
  private take(now: number): bigint | undefined {
    if (this.current && !this.usable(this.current, now)) this.current = undefined;
    if (!this.current && this.spare) {
      this.current = this.usable(this.spare, now) ? this.spare : undefined;
      this.spare = undefined;
    }
    return this.current ? this.issue(this.current) : undefined;
  }

  private usable(b: Block, now: number): boolean {
    return b.used < IDS_PER_BLOCK && now - b.drawnAt < this.maxAgeMs;
  }

  /** The block's next id; undefined once all 4,096 are out (a sequence never reaches the block bits). */
  private issue(b: Block): bigint | undefined {
    if (b.used >= IDS_PER_BLOCK) return undefined;
    this.stats.issued++;
    return (b.base << SEQ_BITS) | BigInt(b.used++);
  }

  /** A freshly drawn block becomes the current one, or the spare, or (both taken) is dropped. */
  private install(b: Block): void {
    const now = this.now();
    if (b === this.current || b === this.spare || !this.usable(b, now)) return; // joiners install it once
    if (!this.current || !this.usable(this.current, now)) this.current = b;
    else if (!this.spare) this.spare = b;
    else this.stats.discarded++;
  }

  private refillIfDue(bg: Pick<Deps, "waitUntil">, now: number): void {
    const c = this.current;
    if (!c || this.spare || this.refilling) return;
    if (c.used < IDS_PER_BLOCK * REFILL_AT && now - c.drawnAt < this.maxAgeMs * REFILL_AT) return;
    this.refilling = true;
    bg.waitUntil(
      this.draw()
        .then(
          (b) => this.install(b),
          () => {}, // counted in draw(); the next call past the threshold tries again
        )
        .finally(() => {
          this.refilling = false;
        }),
    );
  }

  private drawForeground(): Promise<Block> {
    if (!this.sharesIo) return this.draw();
    if (!this.joinable) {
      const p: Promise<Block> = this.draw().finally(() => {
        if (this.joinable === p) this.joinable = undefined;
      });
      this.joinable = p;
    }
    return this.joinable;
  }

  /** One id-block call. */
  private async draw(): Promise<Block> {
    const drawnAt = this.now();
    try {
      const base = await scriptsFor(this.redis).idBlock.exec([keys.idBlock()], [String(drawnAt - ID_EPOCH_MS)]);
      this.stats.draws++;
      return { base: BigInt(base), used: 0, drawnAt };
    } catch (err) {
      this.stats.drawFailures++;
      this.lastFailure = err;
      throw err;
    }
  }
}

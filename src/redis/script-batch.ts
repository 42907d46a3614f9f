/**
 * Coalesces concurrent calls of one Lua script into one Upstash `/pipeline` request: calls that
 * arrive within one turn of the event loop share a round trip; a lone call goes out alone through
 * `Script.exec` after that one turn. Upstash bills a pipeline of N as N commands, so the command
 * count per attempt stays one; only round trips and their CPU are shared. NOSCRIPT comes back per
 * command, and those calls fall back to `Script.exec` one by one.
 * Only where requests may share in-flight I/O (src/runtime.ts `sharesIo`: Bun, Deno); on workerd
 * each call is its own EVALSHA on its own request's fetch.
 * Why, with the numbers: docs/decisions/per-runtime-batching.md, docs/modules.md "redis/script-batch.ts".
 */
import { errors as redisErrors, type Redis } from "@upstash/redis";
import { sha1Hex } from "../util/crypto.ts";

interface Pending<T> {
  keys: string[];
  args: string[];
  resolve(v: T): void;
  reject(e: unknown): void;
}

export interface ScriptBatchStats {
  calls: number;
  /** Pipeline requests sent (a batch of one is sent as a plain EVALSHA and not counted here). */
  pipelines: number;
  /** Largest batch so far. */
  largest: number;
}

export class ScriptBatcher<T> {
  private readonly queues = new Map<Redis, Pending<T>[]>();
  private sha1: string | undefined;
  readonly stats: ScriptBatchStats = { calls: 0, pipelines: 0, largest: 0 };

  /** `script(redis)` is the client's handle (src/redis/scripts.ts), `source` its Lua text. */
  constructor(
    private readonly source: string,
    private readonly script: (redis: Redis) => { exec(keys: string[], args: string[]): Promise<T> },
    /** False on workerd: every call goes out alone, in its caller's own request. */
    private readonly shared = true,
  ) {}

  exec(redis: Redis, keys: string[], args: string[]): Promise<T> {
    this.stats.calls++;
    if (!this.shared) return this.script(redis).exec(keys, args);
    return new Promise<T>((resolve, reject) => {
      let q = this.queues.get(redis);
      if (!q) {
        q = [];
        this.queues.set(redis, q);
        // The queue is sent on the next turn; every call until then joins it. Errors of the flush
        // are delivered to each caller's promise, so the timer's own promise never rejects.
        setTimeout(() => {
          this.flush(redis).catch(() => {});
        }, 0);
      }
      q.push({ keys, args, resolve, reject });
    });
  }

  private async flush(redis: Redis): Promise<void> {
    const batch = this.queues.get(redis) ?? [];
    this.queues.delete(redis);
    if (batch.length > this.stats.largest) this.stats.largest = batch.length;
    const one = batch.length === 1 ? batch[0] : undefined;
    if (one) {
      this.script(redis).exec(one.keys, one.args).then(one.resolve, one.reject);
      return;
    }
    let results: { result: unknown; error?: string }[];
    try {
      const sha = (this.sha1 ??= await sha1Hex(this.source));
      const p = redis.pipeline();
      for (const b of batch) p.evalsha(sha, b.keys, b.args);
      this.stats.pipelines++;
      results = (await p.exec({ keepErrors: true })) as { result: unknown; error?: string }[];
    } catch (err) {
      for (const b of batch) b.reject(err);
      return;
    }
    batch.forEach((b, i) => {
      const r = results[i];
      if (!r) b.reject(new Error("pipeline returned fewer results than commands"));
      else if (r.error === undefined || r.error === null) b.resolve(r.result as T);
      else if (/NOSCRIPT/i.test(r.error)) this.script(redis).exec(b.keys, b.args).then(b.resolve, b.reject);
      // Redis answered this command with an error: the SDK's own type for it, as an unbatched call
      // would throw, so callers tell it from a lost reply (resilience.ts isRedisFailure).
      else b.reject(new redisErrors.UpstashError(r.error));
    });
  }
}

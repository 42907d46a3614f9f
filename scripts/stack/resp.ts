/**
 * A small RESP2 client for the Upstash-REST stand-in (scripts/stack/upstash-rest.ts).
 *
 * Why hand-written: the stand-in must re-encode every Redis reply the way Upstash does, which
 * needs two things general-purpose clients hide:
 *   - the **kind** of a string reply: a status (`+OK`) is sent as plain `"OK"` while a bulk string
 *     is base64-encoded, and an error reply becomes an `{"error"}` entry;
 *   - the **raw bytes** of bulk strings, so binary values survive base64 unchanged.
 * Bun's built-in RedisClient speaks RESP3 and turns maps into objects and some integers into
 * booleans; the Upstash wire format is RESP2-shaped.
 *
 * Design (hot path of the benchmarks):
 *   - One TCP connection carries many in-flight commands (pipelining). Replies arrive in the
 *     order the commands were written, so a FIFO of pending batches is enough to match them.
 *   - A batch (`send(commands)`) resolves once with all its replies: one promise per HTTP
 *     request, not one per command.
 *   - Writes made in the same event-loop turn are coalesced into one string and written with one
 *     syscall (the write is the dominant cost per request otherwise).
 *   - Parsing is incremental over the received Buffers. Bulk strings are zero-copy `subarray`
 *     views of the received chunk (Bun hands a fresh Buffer to every `data` callback, so views
 *     stay valid). A reply split across chunks is re-parsed only once enough bytes have arrived
 *     for the part that was missing, so a large bulk string is not re-concatenated per chunk.
 *   - A per-connection deadline check fails everything in flight when the oldest batch has
 *     waited longer than its timeout. With pipelining one late reply cannot be skipped (every
 *     later reply would be matched to the wrong command), so the whole connection is dropped.
 */
import type { Socket } from "bun";

/** A status reply (`+OK`, `+PONG`, `+string` from TYPE). Kept as raw bytes, like bulk strings. */
export class RespStatus {
  declare private readonly brand: "RespStatus";
  constructor(readonly raw: Buffer) {}
  get text(): string {
    return this.raw.toString("utf8");
  }
  /** True for exactly `+OK`, the one status Upstash sends unencoded. */
  isOk(): boolean {
    const r = this.raw;
    return r.length === 2 && r[0] === 0x4f && r[1] === 0x4b;
  }
}

/** An error reply (`-ERR ...`). Not an `Error`: no stack is captured on this hot path. */
export class RespError {
  /** Type-only brand: keeps `instanceof` narrowing exact (structurally, Buffer would overlap). */
  declare private readonly brand: "RespError";
  constructor(readonly message: string) {}
}

/**
 * A decoded RESP2 reply. Bulk strings are `Buffer`s (raw bytes), nil is `null`, integers are
 * numbers, or `bigint`s when they do not fit a double exactly (so 64-bit values survive).
 */
export type RespValue = Buffer | RespStatus | RespError | number | bigint | null | RespValue[];

/** A command argument: strings are sent UTF-8 encoded, byte arrays as they are. */
export type RespArg = string | Uint8Array;
export type RespCommand = readonly RespArg[];

/** The connection failed (refused, closed, timed out): the command may or may not have run. */
export class RedisConnectionError extends Error {
  override name = "RedisConnectionError";
}

export interface RespConnectionOptions {
  host: string;
  port: number;
  /** Give up connecting after this long. Default 2000 ms. */
  connectTimeoutMs?: number;
  /** Default deadline for a batch's replies. Default 10 000 ms. `Infinity` disables it. */
  commandTimeoutMs?: number;
}

interface Batch {
  expect: number;
  replies: RespValue[];
  resolve: (replies: RespValue[]) => void;
  reject: (err: Error) => void;
  /** `performance.now()` after which the connection is considered stuck. */
  deadline: number;
}

/** Returned by the parser when the buffer ends inside an element. */
const INCOMPLETE: unique symbol = Symbol("incomplete");
/** Returned by the parser after the header of a non-empty array (its frame is on the stack). */
const ARRAY_OPEN: unique symbol = Symbol("array-open");
type Parsed = RespValue | typeof INCOMPLETE;

/** An array reply being filled while its elements are parsed. */
interface Frame {
  items: RespValue[];
  filled: number;
}

const CR = 13;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** One RESP2 connection with pipelining. Create with `RespConnection.connect`. */
export class RespConnection {
  /** Set once the socket is closed or was failed; never reset (connections are not reused). */
  closed = false;
  /** Called once when the connection closes for any reason other than `close()`. */
  onLost: ((err: Error) => void) | null = null;

  private socket: Socket<RespConnection> | null = null;
  private readonly timeoutMs: number;

  // --- pending replies: a FIFO of batches, as an array with a moving head (no O(n) shift) ---
  private queue: Batch[] = [];
  private head = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;

  // --- output: strings written in the same tick are joined and sent once ---
  private outStr = "";
  private outBytes = 0;
  /** Binary parts (only when a command has Uint8Array args); flushed in order with outStr. */
  private outParts: Buffer[] | null = null;
  private flushScheduled = false;
  /** Bytes the kernel did not accept yet (backpressure); written again on `drain`. */
  private backlog: Buffer | null = null;

  // --- input: `buf[pos..]` is unparsed; `chunks` hold data waiting until `need` bytes exist ---
  private buf: Buffer | null = null;
  private pos = 0;
  private chunks: Buffer[] = [];
  private chunkBytes = 0;
  /** Bytes (from `pos`) needed before parsing the current partial reply can succeed. */
  private need = 0;
  /** Arrays whose elements are still being parsed, outermost first. */
  private stack: Frame[] = [];
  /** Scratch: index just after the element returned by the last `parseElement` call. */
  private next = 0;
  /** Scratch: absolute index in `buf` the parser needs, set when it returns INCOMPLETE. */
  private needAbs = 0;

  private constructor(timeoutMs: number) {
    this.timeoutMs = timeoutMs;
  }

  static async connect(opts: RespConnectionOptions): Promise<RespConnection> {
    const conn = new RespConnection(opts.commandTimeoutMs ?? 10_000);
    const connectTimeout = opts.connectTimeoutMs ?? 2000;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const connecting = Bun.connect<RespConnection>({
      hostname: opts.host,
      port: opts.port,
      data: conn,
      socket: {
        data: (s, chunk) => s.data.onData(chunk),
        drain: (s) => s.data.onDrain(),
        close: (s, err) =>
          s.data.fail(new RedisConnectionError(`redis connection closed${err ? `: ${err.message}` : ""}`)),
        error: (s, err) => s.data.fail(new RedisConnectionError(`redis connection error: ${err.message}`)),
        end: (s) => s.data.fail(new RedisConnectionError("redis closed the connection")),
        connectError: () => {
          /* reported through the rejected promise below */
        },
      },
    });
    try {
      const socket = await Promise.race([
        connecting,
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new RedisConnectionError(`connect to redis ${opts.host}:${opts.port} timed out`)),
            connectTimeout,
          );
        }),
      ]);
      conn.socket = socket;
      socket.setNoDelay(true);
      return conn;
    } catch (e) {
      // A connect that completes after the timeout must not leak a socket.
      connecting.then((s) => s.terminate()).catch(() => {});
      conn.closed = true;
      if (e instanceof RedisConnectionError) throw e;
      throw new RedisConnectionError(`cannot connect to redis ${opts.host}:${opts.port}: ${(e as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Number of batches written and not yet answered. */
  get inFlight(): number {
    return this.queue.length - this.head;
  }

  /**
   * Writes `commands` (pipelined) and resolves with their replies in order. Error replies are
   * values (`RespError`), not rejections; the promise rejects only with `RedisConnectionError`.
   */
  send(commands: readonly RespCommand[], timeoutMs: number = this.timeoutMs): Promise<RespValue[]> {
    if (this.closed) return Promise.reject(new RedisConnectionError("redis connection is closed"));
    if (commands.length === 0) return Promise.resolve([]);
    for (const cmd of commands) this.encode(cmd);
    return new Promise<RespValue[]>((resolve, reject) => {
      const deadline = timeoutMs === Infinity ? Infinity : performance.now() + timeoutMs;
      this.queue.push({ expect: commands.length, replies: [], resolve, reject, deadline });
      if (this.timer === null && deadline !== Infinity) this.armTimer(timeoutMs);
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        // setImmediate, not a microtask: it runs after every callback of this event-loop turn,
        // so commands from all HTTP requests that arrived together share one write syscall
        // (measured: ~1.5x the single-command throughput of a per-request write).
        setImmediate(() => this.flush());
      }
    });
  }

  /** One command; resolves with its reply (which may be a `RespError`). */
  async command(args: RespCommand, timeoutMs?: number): Promise<RespValue> {
    const [reply] = await this.send([args], timeoutMs);
    return reply ?? null;
  }

  /** Closes the socket; everything in flight fails with `RedisConnectionError`. */
  close(): void {
    this.onLost = null;
    this.fail(new RedisConnectionError("redis connection closed by the client"));
  }

  // ------------------------------------------------------------------------------ writing

  private encode(cmd: RespCommand): void {
    let s = `*${cmd.length}\r\n`;
    let bytes = s.length;
    for (const arg of cmd) {
      if (typeof arg === "string") {
        const n = Buffer.byteLength(arg, "utf8");
        const h = `$${n}\r\n`;
        s += `${h + arg}\r\n`;
        bytes += h.length + n + 2;
      } else {
        const h = `$${arg.byteLength}\r\n`;
        s += h;
        bytes += h.length;
        // Binary argument: close the current string part and queue the bytes as they are.
        this.outStr += s;
        this.outBytes += bytes;
        this.pushBinary(Buffer.from(arg.buffer, arg.byteOffset, arg.byteLength));
        s = "\r\n";
        bytes = 2;
      }
    }
    this.outStr += s;
    this.outBytes += bytes;
  }

  private pushBinary(b: Buffer): void {
    const parts = (this.outParts ??= []);
    if (this.outStr.length > 0) parts.push(Buffer.from(this.outStr, "utf8"));
    parts.push(b);
    this.outStr = "";
    this.outBytes = 0;
  }

  private flush(): void {
    this.flushScheduled = false;
    const socket = this.socket;
    if (this.closed || socket === null) return;
    let data: string | Buffer;
    let bytes: number;
    if (this.outParts !== null) {
      if (this.outStr.length > 0) this.outParts.push(Buffer.from(this.outStr, "utf8"));
      data = Buffer.concat(this.outParts);
      bytes = data.length;
      this.outParts = null;
    } else {
      data = this.outStr;
      bytes = this.outBytes;
    }
    this.outStr = "";
    this.outBytes = 0;
    if (bytes === 0) return;
    if (this.backlog !== null) {
      // Order matters: new bytes go behind what the kernel has not taken yet.
      this.backlog = Buffer.concat([this.backlog, typeof data === "string" ? Buffer.from(data, "utf8") : data]);
      return;
    }
    const written = socket.write(data);
    if (written < 0) {
      this.fail(new RedisConnectionError("redis connection is closed"));
    } else if (written < bytes) {
      const all = typeof data === "string" ? Buffer.from(data, "utf8") : data;
      this.backlog = all.subarray(written);
    }
  }

  private onDrain(): void {
    const socket = this.socket;
    const pending = this.backlog;
    if (socket === null || pending === null || this.closed) return;
    const written = socket.write(pending);
    if (written < 0) this.fail(new RedisConnectionError("redis connection is closed"));
    else this.backlog = written < pending.length ? pending.subarray(written) : null;
  }

  // ----------------------------------------------------------------------------- timeouts

  private armTimer(ms: number): void {
    this.timer = setTimeout(() => this.checkDeadline(), Math.max(1, Math.ceil(ms)));
    this.timer.unref();
  }

  /** Fails the connection if the oldest batch is overdue; otherwise re-arms for the oldest. */
  private checkDeadline(): void {
    this.timer = null;
    if (this.closed) return;
    const now = performance.now();
    // The oldest batch with a finite deadline decides; batches are answered in order, so if it
    // is not overdue, none written before it is waiting on a stuck connection either.
    for (let i = this.head; i < this.queue.length; i++) {
      const b = this.queue[i]!;
      if (b.deadline === Infinity) continue;
      if (b.deadline <= now) {
        this.fail(new RedisConnectionError(`redis did not answer within ${Math.round(this.timeoutMs)} ms`));
        return;
      }
      this.armTimer(b.deadline - now);
      return;
    }
  }

  // ------------------------------------------------------------------------------ reading

  private onData(chunk: Buffer): void {
    if (this.closed) return;
    if (this.buf === null) {
      this.buf = chunk;
      this.pos = 0;
    } else {
      // Part of an element is already buffered: wait until the missing bytes have arrived,
      // then join once. Only the unfinished element is kept, so nothing is parsed twice
      // except that one element's header.
      this.chunks.push(chunk);
      this.chunkBytes += chunk.length;
      if (this.buf.length - this.pos + this.chunkBytes < this.need) return;
      this.chunks.unshift(this.buf.subarray(this.pos));
      this.buf = Buffer.concat(this.chunks);
      this.pos = 0;
      this.chunks = [];
      this.chunkBytes = 0;
    }
    const buf = this.buf;
    const stack = this.stack;
    while (this.pos < buf.length) {
      let value: Parsed | typeof ARRAY_OPEN;
      try {
        value = this.parseElement(buf, this.pos);
      } catch (e) {
        this.fail(new RedisConnectionError(`bad reply from redis: ${(e as Error).message}`));
        return;
      }
      if (value === INCOMPLETE) {
        this.need = this.needAbs - this.pos;
        return;
      }
      this.pos = this.next;
      if (value === ARRAY_OPEN) continue; // a non-empty array header: its frame is on the stack
      // Attach the finished value to the array being filled; completed arrays bubble up.
      for (;;) {
        const top = stack[stack.length - 1];
        if (top === undefined) {
          this.deliver(value);
          if (this.closed) return;
          break;
        }
        top.items[top.filled++] = value;
        if (top.filled < top.items.length) break;
        stack.pop();
        value = top.items;
      }
    }
    this.buf = null;
    this.pos = 0;
    this.need = 0;
  }

  private deliver(value: RespValue): void {
    const batch = this.queue[this.head];
    if (batch === undefined) {
      this.fail(new RedisConnectionError("redis sent a reply nobody asked for"));
      return;
    }
    batch.replies.push(value);
    if (batch.replies.length < batch.expect) return;
    this.queue[this.head] = undefined as unknown as Batch; // drop the reference for GC
    this.head++;
    if (this.head === this.queue.length) {
      this.queue = [];
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.head);
      this.head = 0;
    }
    batch.resolve(batch.replies);
  }

  /**
   * Parses one element at `p`: a scalar, an empty/nil array, or the header of a non-empty array
   * (pushes a frame, returns ARRAY_OPEN). Sets `this.next` past it, or returns INCOMPLETE and
   * sets `this.needAbs` to the smallest buffer length at which trying again can make progress.
   * Arrays are not parsed recursively so that a huge reply arriving in many chunks is parsed
   * once, element by element, instead of from its start after every chunk.
   */
  private parseElement(buf: Buffer, p: number): Parsed | typeof ARRAY_OPEN {
    const eol = buf.indexOf(CR, p + 1);
    if (eol === -1 || eol + 1 >= buf.length) {
      this.needAbs = Math.max(buf.length + 1, eol + 2);
      return INCOMPLETE;
    }
    switch (buf[p]) {
      case 0x24 /* $ bulk */:
        {
          const len = this.parseInt(buf, p + 1, eol);
          if (len < 0) {
            this.next = eol + 2;
            return null;
          }
          const end = eol + 2 + len;
          if (end + 2 > buf.length) {
            this.needAbs = end + 2;
            return INCOMPLETE;
          }
          this.next = end + 2;
          return buf.subarray(eol + 2, end);
        }
      case 0x3a /* : integer */:
        this.next = eol + 2;
        return this.parseInteger(buf, p + 1, eol);
      case 0x2b /* + status */:
        this.next = eol + 2;
        return new RespStatus(buf.subarray(p + 1, eol));
      case 0x2d /* - error */:
        this.next = eol + 2;
        return new RespError(buf.toString("utf8", p + 1, eol));
      case 0x2a /* * array */:
        {
          const n = this.parseInt(buf, p + 1, eol);
          this.next = eol + 2;
          if (n < 0) return null;
          if (n === 0) return [];
          this.stack.push({ items: new Array<RespValue>(n), filled: 0 });
          return ARRAY_OPEN;
        }
      default:
        throw new Error(`unexpected type byte 0x${(buf[p] ?? 0).toString(16)} at offset ${p}`);
    }
  }

  /** Parses a small signed decimal (lengths, counts) without allocating a string. */
  private parseInt(buf: Buffer, from: number, to: number): number {
    let i = from;
    let neg = false;
    if (buf[i] === 0x2d) {
      neg = true;
      i++;
    }
    let n = 0;
    for (; i < to; i++) {
      const d = buf[i]! - 0x30;
      if (d < 0 || d > 9) throw new Error("bad number in reply header");
      n = n * 10 + d;
    }
    return neg ? -n : n;
  }

  /** Integer replies are 64-bit: past 15 digits, go through BigInt so no precision is lost. */
  private parseInteger(buf: Buffer, from: number, to: number): number | bigint {
    if (to - from <= 15) return this.parseInt(buf, from, to);
    const big = BigInt(buf.toString("latin1", from, to));
    return big > MAX_SAFE || big < -MAX_SAFE ? big : Number(big);
  }

  // ------------------------------------------------------------------------------ failure

  /** Marks the connection dead, closes the socket and rejects everything in flight. */
  private fail(err: Error): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    const pending = this.queue.slice(this.head);
    this.queue = [];
    this.head = 0;
    this.buf = null;
    this.chunks = [];
    this.stack = [];
    this.backlog = null;
    this.outStr = "";
    this.outParts = null;
    try {
      this.socket?.terminate();
    } catch {
      /* already closed */
    }
    this.socket = null;
    for (const b of pending) b.reject(err);
    const lost = this.onLost;
    this.onLost = null;
    lost?.(err);
  }
}

export interface RespClientOptions extends RespConnectionOptions {
  /** Most dedicated connections open at once; further `withDedicated` calls wait. Default 64. */
  maxDedicated?: number;
  /** Idle dedicated connections kept for reuse. Default 8. */
  maxIdle?: number;
  /**
   * Called when an established connection is lost unexpectedly. Redis may have restarted, so
   * server-side state such as the script cache may be gone.
   */
  onConnectionLost?: () => void;
}

/**
 * A shared pipelined connection (reconnected lazily after a failure) plus a pool of dedicated
 * connections for things that must not share one: MULTI/EXEC (a transaction's commands would
 * interleave with everyone else's) and blocking commands (they would stall every caller).
 */
export class RespClient {
  private shared: RespConnection | null = null;
  private connecting: Promise<RespConnection> | null = null;
  private idle: RespConnection[] = [];
  private open = 0;
  private waiters: Array<{ resolve: (c: RespConnection) => void; reject: (e: Error) => void }> = [];
  private closedByUser = false;
  private readonly all = new Set<RespConnection>();

  constructor(private readonly opts: RespClientOptions) {}

  /** Pipelined batch on the shared connection. Rejects only with `RedisConnectionError`. */
  send(commands: readonly RespCommand[], timeoutMs?: number): Promise<RespValue[]> {
    const c = this.shared;
    // Fast path: no await when connected, so the write happens in this tick.
    if (c !== null && !c.closed) return c.send(commands, timeoutMs);
    return this.connectShared().then((conn) => conn.send(commands, timeoutMs));
  }

  command(args: RespCommand, timeoutMs?: number): Promise<RespValue> {
    return this.send([args], timeoutMs).then((r) => r[0] ?? null);
  }

  /**
   * Runs `fn` with a connection nobody else uses meanwhile. If `fn` throws, or leaves the
   * connection busy, the connection is closed instead of returned to the pool: its state (an
   * open MULTI, a reply still on its way) is unknown.
   */
  async withDedicated<T>(fn: (conn: RespConnection) => Promise<T>): Promise<T> {
    const conn = await this.acquire();
    let ok = false;
    try {
      const result = await fn(conn);
      ok = true;
      return result;
    } finally {
      this.release(conn, ok && !conn.closed && conn.inFlight === 0);
    }
  }

  /** Closes every connection; pending commands fail. The client cannot be used afterwards. */
  async close(): Promise<void> {
    this.closedByUser = true;
    for (const w of this.waiters.splice(0)) w.reject(new RedisConnectionError("redis client closed"));
    for (const c of [...this.all]) c.close();
    this.all.clear();
    this.idle = [];
    this.shared = null;
    const pending = this.connecting;
    if (pending) await pending.then((c) => c.close()).catch(() => {});
  }

  private async newConnection(): Promise<RespConnection> {
    if (this.closedByUser) throw new RedisConnectionError("redis client closed");
    const conn = await RespConnection.connect(this.opts);
    if (this.closedByUser) {
      conn.close();
      throw new RedisConnectionError("redis client closed");
    }
    this.all.add(conn);
    conn.onLost = () => {
      this.all.delete(conn);
      this.opts.onConnectionLost?.();
    };
    return conn;
  }

  private connectShared(): Promise<RespConnection> {
    if (this.connecting) return this.connecting;
    const p = this.newConnection().then(
      (conn) => {
        this.shared = conn;
        this.connecting = null;
        return conn;
      },
      (err: unknown) => {
        this.connecting = null;
        throw err;
      },
    );
    this.connecting = p;
    return p;
  }

  private async acquire(): Promise<RespConnection> {
    while (this.idle.length > 0) {
      const c = this.idle.pop()!;
      if (!c.closed) return c;
      this.open--;
    }
    if (this.open < (this.opts.maxDedicated ?? 64)) {
      this.open++;
      try {
        return await this.newConnection();
      } catch (e) {
        this.open--;
        throw e;
      }
    }
    return await new Promise<RespConnection>((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  private release(conn: RespConnection, reusable: boolean): void {
    if (reusable && !this.closedByUser) {
      const w = this.waiters.shift();
      if (w) {
        w.resolve(conn);
        return;
      }
      if (this.idle.length < (this.opts.maxIdle ?? 8)) {
        this.idle.push(conn);
        return;
      }
    }
    if (!conn.closed) {
      this.all.delete(conn);
      conn.close();
    }
    this.open--;
    // A slot freed up: let one waiter open a fresh connection.
    const w = this.waiters.shift();
    if (w) {
      this.open++;
      this.newConnection().then(w.resolve, (e: unknown) => {
        this.open--;
        w.reject(e as Error);
      });
    }
  }
}

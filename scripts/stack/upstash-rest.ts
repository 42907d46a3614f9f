/**
 * Upstash-REST stand-in: the HTTP API of Upstash Redis (docs/protocols.md §1) served by Bun in
 * front of a real redis-server, so the unmodified `@upstash/redis` and `@upstash/ratelimit`
 * SDKs run locally and in tests against real Redis semantics (Lua, transactions, TTLs).
 *
 * Routes: `POST /` (one command), `POST /pipeline`, `POST /multi-exec`, `GET /` (welcome), and
 * for tests and benchmarks `GET /__standin/stats`, `POST /__standin/stats/reset` and
 * `GET|POST /__standin/limits` (the command-rate cap below).
 *
 * Reply encoding follows Upstash, not SRH: with `Upstash-Encoding: base64` every string at every
 * depth is the base64 of its raw bytes except the status `OK`; errors are never encoded.
 *
 * Scripts: `@upstash/ratelimit` 2.2.0 scripts start with `#!lua flags=allow-key-locking`, which
 * stock Redis 7 rejects, and the SDK's hard-coded EVALSHA hashes are SHA-1s of the text *with*
 * that line. So the stand-in runs a stripped copy (the line blanked, line numbers kept) and
 * answers for the original SHA-1: `origSha → { stripped, realSha }` in `scripts` below.
 *
 * Command-rate cap (optional, `maxCommandsPerSecond` / `setLimits`): a hosted database has a
 * per-second command quota ("Max Req Per Sec" on Upstash's pricing page, 10 000 on most plans), and
 * a bench on a 2-core machine can only show what sharding buys by scaling that quota down. Commands
 * are counted per wall-clock second (a pipeline or transaction counts each of its commands); a
 * request that would take the second past the cap is refused whole, before Redis sees it, with
 * {@link THROTTLED_STATUS} and an `{"error"}` body in the form Upstash uses for its quota refusals —
 * see `throttledError` for the evidence and what `@upstash/redis` makes of it.
 *
 * Sync tokens (`upstash-sync-token`, docs/protocols.md §1.8): by default an increasing counter per
 * answer. With `syncTokens: "offset"` (the primary of a read region, read-region.ts) the token is the
 * primary's replication offset after the request; a stand-in with `replica` set (in front of a
 * `replicaof` redis-server) answers a request carrying such a token only once its own offset has
 * reached it — polling `INFO replication` every `pollMs`, at most `maxWaitMs`, then refusing with
 * {@link REPLICA_BEHIND_STATUS} — so a client that echoes the token reads its own writes.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import {
  RedisConnectionError,
  RespClient,
  RespError,
  RespStatus,
  type RespCommand,
  type RespConnection,
  type RespValue,
} from "./resp.ts";

export interface UpstashRestOptions {
  redisHost: string;
  redisPort: number;
  token: string;
  /** 0 or undefined: a free port. */
  port?: number;
  /** Default 127.0.0.1. */
  hostname?: string;
  /** Deadline for Redis to answer a request (blocking commands get their own timeout on top). Default 10 s. */
  commandTimeoutMs?: number;
  /**
   * Commands per wall-clock second this database serves; past it requests are refused as
   * throttled (see the file comment). 0 or undefined: no cap. Changeable later with `setLimits`.
   */
  maxCommandsPerSecond?: number;
  /** Clock in ms since the epoch (tests pin the second windows); default `Date.now`. */
  now?: () => number;
  /** "counter" (default): an increasing number per answer; "offset": the Redis replication offset after it. */
  syncTokens?: "counter" | "offset";
  /**
   * This stand-in serves a replica (read region): tokens are offsets, and a request whose token is
   * ahead of the replica waits for it (poll every `pollMs`, default 2; give up after `maxWaitMs`,
   * default 2000).
   */
  replica?: { pollMs?: number; maxWaitMs?: number };
}

export interface UpstashRestLimits {
  /** The command-rate cap per second, or null when there is none. */
  commandsPerSecond: number | null;
}

export interface UpstashRestStats {
  /** Command requests that reached Redis: one HTTP request is one Redis round trip. */
  requests: number;
  /** Commands in those requests. */
  commands: number;
  /** Requests per path: "/", "/pipeline", "/multi-exec". */
  byPath: Record<string, number>;
  /** Requests refused by the command-rate cap (they never reached Redis, so `requests` omits them). */
  throttledRequests: number;
  /** Commands in those requests. */
  throttledCommands: number;
  /**
   * Commands served (reached Redis) in the busiest wall-clock second since the last reset; with a
   * cap, `maxPerSecond / cap` is how close the database came to its quota (never above 1).
   */
  maxPerSecond: number;
  /** Commands offered (served + throttled) in the busiest second: the demand, cap or not. */
  maxOfferedPerSecond: number;
  /** Replica only: requests that arrived with a sync token ahead of the replica and waited for it. */
  syncWaits: number;
  /** Replica only: those given up on (the replica did not catch up within `maxWaitMs`). */
  syncTimeouts: number;
}

export interface UpstashRestServer {
  url: string;
  port: number;
  stats(): UpstashRestStats;
  resetStats(): void;
  /** The current cap. */
  limits(): UpstashRestLimits;
  /**
   * Sets (a positive number) or clears (null or 0) the command-rate cap at once; commands already
   * served in the current second count against a new cap.
   */
  setLimits(limits: UpstashRestLimits): void;
  stop(): Promise<void>;
}

/**
 * Status of a throttled request. Upstash's REST docs list 200, 400 ("a syntax error, an
 * invalid/unsupported command is sent or command execution fails"), 401 and 405, no 429; its quota
 * refusals (daily/monthly request limits) reach `@upstash/redis` through the SDK's non-2xx branch.
 */
export const THROTTLED_STATUS = 400;

/**
 * Status of a replica request refused because the replica did not reach the request's sync token
 * in time. Upstash documents no status for it; ours is 503 (try again, or read the primary).
 */
export const REPLICA_BEHIND_STATUS = 503;

/** Prefix of a throttled request's error text (what tests and classifiers can match on). */
export const THROTTLED_ERROR_PREFIX = "ERR max commands per second limit exceeded";

/**
 * The error text of a throttled request, in the form of Upstash's documented quota refusals
 * (`ERR max daily request limit exceeded. Limit: 10000, Usage: 10001. See … for details`, as
 * reported through @upstash/redis in wotschofsky/domain-digger#36; `ERR max requests limit
 * exceeded` in upstash/docs redis/troubleshooting). Upstash publishes no text for its per-second
 * quota — its pricing FAQ only says a database over a limit "may" be rate limited, and its Redis
 * FAQ that databases over their quotas "are throttled using a backoff strategy" — so the wording
 * after `ERR max` is ours (unverified against the hosted service). `Usage` is the commands the
 * second would have held with this request.
 *
 * `@upstash/redis` 1.39.0 turns the reply into `UpstashError("<error>, command was: <body>")` for a
 * single command, a pipeline (every auto-pipelined call of the batch rejects with it) and a
 * transaction alike, and does not retry it: its retry loop covers only a `fetch` that throws.
 */
function throttledError(cap: number, usage: number): string {
  return `${THROTTLED_ERROR_PREFIX}. Limit: ${cap}, Usage: ${usage}.`;
}

function emptyStats(): UpstashRestStats {
  return {
    requests: 0,
    commands: 0,
    byPath: {},
    throttledRequests: 0,
    throttledCommands: 0,
    maxPerSecond: 0,
    maxOfferedPerSecond: 0,
    syncWaits: 0,
    syncTimeouts: 0,
  };
}

/** A cap from an option or `/__standin/limits`: a positive integer → cap, 0/null → none, else undefined (invalid). */
function normalizeCap(v: unknown): number | null | undefined {
  if (v === null || v === 0) return null;
  return typeof v === "number" && Number.isInteger(v) && v > 0 ? v : undefined;
}

// ------------------------------------------------------------------------------------ scripts

/** Shebang flags Redis 7 understands; anything else (Upstash's allow-key-locking) is dropped. */
const REDIS7_SCRIPT_FLAGS = new Set(["no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys"]);

function sha1(text: string): string {
  return createHash("sha1").update(text, "utf8").digest("hex");
}

/**
 * Returns the script Redis 7 can run, or null when `src` needs no change. A first line
 * `#!lua ... flags=a,b` with flags Redis does not know loses those flags; if none is left the
 * line becomes empty. The newline stays, so Lua error line numbers match the original.
 */
export function stripUnknownShebangFlags(src: string): string | null {
  if (!src.startsWith("#!lua")) return null;
  const nl = src.indexOf("\n");
  const line = (nl === -1 ? src : src.slice(0, nl)).replace(/\r$/, "");
  const rest = line.slice(5);
  if (rest !== "" && !/^\s/.test(rest)) return null; // e.g. "#!luajit": not a Lua shebang
  const kept: string[] = [];
  let changed = false;
  for (const token of rest.trim().split(/\s+/)) {
    if (token === "") continue;
    if (!token.startsWith("flags=")) {
      kept.push(token); // let Redis judge other options
      continue;
    }
    const flags = token
      .slice(6)
      .split(",")
      .filter((f) => f !== "");
    const known = flags.filter((f) => REDIS7_SCRIPT_FLAGS.has(f));
    if (known.length !== flags.length) changed = true;
    if (known.length > 0) kept.push(`flags=${known.join(",")}`);
  }
  if (!changed) return null;
  const newLine = kept.length > 0 ? `#!lua ${kept.join(" ")}` : "";
  return nl === -1 ? newLine : newLine + src.slice(nl);
}

interface ScriptEntry {
  /** What Redis runs. */
  stripped: string;
  /** sha1(stripped): the SHA Redis knows the script by. */
  realSha: string;
}

/** Bound on remembered scripts; oldest forgotten first (Map keeps insertion order). */
const MAX_SCRIPTS = 10_000;

// ---------------------------------------------------------------------------------- commands

/**
 * Commands that would change the state of the shared pipelined connection (and so corrupt
 * every other caller's replies) or that the REST API cannot express.
 */
const NOT_AVAILABLE = new Set([
  "MULTI",
  "EXEC",
  "DISCARD",
  "WATCH",
  "UNWATCH",
  "SUBSCRIBE",
  "PSUBSCRIBE",
  "SSUBSCRIBE",
  "UNSUBSCRIBE",
  "PUNSUBSCRIBE",
  "SUNSUBSCRIBE",
  "MONITOR",
  "SYNC",
  "PSYNC",
  "REPLCONF",
  "QUIT",
  "RESET",
  "HELLO",
  "AUTH",
  "SELECT",
]);
/** CLIENT subcommands that are harmless on a shared connection. */
const CLIENT_READONLY = new Set(["LIST", "INFO", "ID", "GETNAME"]);

function notAvailable(name: string, args: readonly string[]): boolean {
  if (NOT_AVAILABLE.has(name)) return true;
  if (name === "CLIENT") return !CLIENT_READONLY.has((args[1] ?? "").toUpperCase());
  return false;
}

/**
 * How long a blocking command may block, in ms (Infinity = forever), or -1 when `args` does not
 * block. Blocking commands run on a dedicated connection: on the shared one they would stall
 * every other caller.
 */
function blockingMs(name: string, args: readonly string[]): number {
  const secs = (s: string | undefined): number => {
    const v = Number(s);
    return !Number.isFinite(v) || v < 0 ? 0 : v === 0 ? Infinity : v * 1000;
  };
  const ms = (s: string | undefined): number => {
    const v = Number(s);
    return !Number.isFinite(v) || v < 0 ? 0 : v === 0 ? Infinity : v;
  };
  switch (name) {
    case "BLPOP":
    case "BRPOP":
    case "BZPOPMIN":
    case "BZPOPMAX":
    case "BRPOPLPUSH":
    case "BLMOVE":
      return secs(args[args.length - 1]);
    case "BLMPOP":
    case "BZMPOP":
      return secs(args[1]);
    case "WAIT":
    case "WAITAOF":
      return ms(args[args.length - 1]);
    case "XREAD":
    case "XREADGROUP":
      for (let i = 1; i < args.length - 1; i++) {
        const a = args[i]!.toUpperCase();
        if (a === "STREAMS") break;
        if (a === "BLOCK") return ms(args[i + 1]);
      }
      return -1;
    default:
      return -1;
  }
}

/** A request's commands, rewritten for Redis. */
interface Plan {
  /** Helper commands written before the user's (SCRIPT LOAD of scripts Redis lost). */
  pre: RespCommand[];
  /** The user's commands as written to Redis (rewritten where needed), in order. */
  wire: RespCommand[];
  /** For user command i: index of its command in `wire`, or -1 when `preset[i]` answers it. */
  slot: number[];
  preset: (RespError | undefined)[];
  /** Rewrites a reply (SCRIPT LOAD/EXISTS answer for the original SHA; NOSCRIPT bookkeeping). */
  post: (((v: RespValue) => RespValue) | undefined)[];
  /** Longest block of a blocking command in the plan, -1 when none. */
  blockMs: number;
}

/** Reply of the HTTP layer: status + JSON body text. */
interface Out {
  status: number;
  body: string;
  /** The sync token to answer with (offset tokens); the counter's next value when absent. */
  sync?: string;
}

class BadRequest extends Error {}

const WELCOME = JSON.stringify("Welcome to the Upstash-REST stand-in (CityHub Edge)!");

function errorBody(message: string): string {
  return `{"error":${JSON.stringify(message)}}`;
}

// ----------------------------------------------------------------------------------- encoding

/** Byte for byte what Upstash sends for a reply value (see docs/protocols.md §1.5–1.6). */
function toJson(v: RespValue, b64: boolean): string {
  if (typeof v === "number") return String(v);
  if (v === null) return "null";
  if (v instanceof Buffer) return b64 ? `"${v.toString("base64")}"` : JSON.stringify(v.toString("utf8"));
  if (Array.isArray(v)) {
    let s = "[";
    for (let i = 0; i < v.length; i++) s += (i === 0 ? "" : ",") + toJson(v[i]!, b64);
    return `${s}]`;
  }
  if (typeof v === "bigint") return v.toString();
  if (v instanceof RespStatus) {
    if (!b64) return JSON.stringify(v.text);
    return v.isOk() ? '"OK"' : `"${v.raw.toString("base64")}"`;
  }
  if (v instanceof RespError) {
    // An error nested in an array (a Lua table holding an error): it is data here, so it is
    // encoded like any other string.
    return b64 ? `"${Buffer.from(v.message, "utf8").toString("base64")}"` : JSON.stringify(v.message);
  }
  return "null"; // unreachable: every RespValue kind is handled above
}

/** `{"result":…}` or `{"error":…}` for one command's reply. */
function entryJson(v: RespValue, b64: boolean): string {
  return v instanceof RespError ? errorBody(v.message) : `{"result":${toJson(v, b64)}}`;
}

/**
 * Body → commands as strings. Arguments may be JSON strings, numbers or booleans and are
 * converted like `String(x)`; anything else is a 400.
 */
function toCommand(raw: unknown, where: string): string[] {
  if (!Array.isArray(raw) || raw.length === 0) {
    throw new BadRequest(`ERR ${where} must be a non-empty JSON array of arguments`);
  }
  const out = new Array<string>(raw.length);
  for (let i = 0; i < raw.length; i++) {
    const a: unknown = raw[i];
    if (typeof a === "string") out[i] = a;
    else if (typeof a === "number" || typeof a === "boolean") out[i] = String(a);
    else throw new BadRequest(`ERR ${where}: argument ${i} must be a string, number or boolean`);
  }
  return out;
}

// ------------------------------------------------------------------------------------- server

export async function startUpstashRest(opts: UpstashRestOptions): Promise<UpstashRestServer> {
  const commandTimeoutMs = opts.commandTimeoutMs ?? 10_000;
  const scripts = new Map<string, ScriptEntry>();
  /** realShas we believe Redis has cached; cleared when a connection is lost (restart?). */
  const loaded = new Set<string>();
  const client = new RespClient({
    host: opts.redisHost,
    port: opts.redisPort,
    commandTimeoutMs,
    onConnectionLost: () => loaded.clear(),
  });
  const expectedAuth = Buffer.from(`Bearer ${opts.token}`, "utf8");
  let syncToken = 0;
  let stats = emptyStats();
  const now = opts.now ?? Date.now;
  const initialCap = normalizeCap(opts.maxCommandsPerSecond ?? null);
  if (initialCap === undefined)
    throw new Error(`maxCommandsPerSecond must be a non-negative integer, got ${opts.maxCommandsPerSecond}`);
  let cap: number | null = initialCap;
  /**
   * The second being counted and what it holds. The cap's count (`served`) is the database's
   * throughput and survives a stats reset; `statServed`/`statOffered` only feed `maxPerSecond`.
   */
  let second = -1;
  let served = 0;
  let statServed = 0;
  let statOffered = 0;

  /**
   * Admits `n` commands into the current second, or returns the throttled reply. Runs before the
   * request reaches Redis, so a refused request has no effect at all.
   */
  function admit(n: number): Out | null {
    const s = Math.floor(now() / 1000);
    if (s !== second) {
      second = s;
      served = 0;
      statServed = 0;
      statOffered = 0;
    }
    statOffered += n;
    if (statOffered > stats.maxOfferedPerSecond) stats.maxOfferedPerSecond = statOffered;
    if (cap !== null && served + n > cap) {
      stats.throttledRequests++;
      stats.throttledCommands += n;
      return { status: THROTTLED_STATUS, body: errorBody(throttledError(cap, served + n)) };
    }
    served += n;
    statServed += n;
    if (statServed > stats.maxPerSecond) stats.maxPerSecond = statServed;
    return null;
  }

  function resetStats(): void {
    stats = emptyStats();
    statServed = 0;
    statOffered = 0;
  }

  const offsetTokens = opts.syncTokens === "offset" || opts.replica !== undefined;
  const pollMs = opts.replica?.pollMs ?? 2;
  const maxWaitMs = opts.replica?.maxWaitMs ?? 2000;

  /**
   * This engine's replication offset: a primary's `master_repl_offset` (bytes of the replication
   * stream it has produced), a replica's `slave_repl_offset` (bytes of it applied), so the two compare.
   */
  async function replicationOffset(): Promise<number> {
    const info = await client.command(["INFO", "replication"]);
    const text = info instanceof Buffer ? info.toString("latin1") : String(info);
    const m = /^slave_repl_offset:(\d+)/m.exec(text) ?? /^master_repl_offset:(\d+)/m.exec(text);
    return m ? Number(m[1]) : 0;
  }

  /**
   * Replica: waits until the replica has applied `want` (a primary's offset token), polling; the
   * offset reached, or null when `maxWaitMs` passed first.
   */
  async function catchUp(want: number): Promise<number | null> {
    let at = await replicationOffset();
    if (at >= want) return at;
    stats.syncWaits++;
    const deadline = Date.now() + maxWaitMs;
    while (at < want) {
      if (Date.now() >= deadline) {
        stats.syncTimeouts++;
        return null;
      }
      await new Promise((r) => setTimeout(r, pollMs));
      at = await replicationOffset();
    }
    return at;
  }

  /** The entry for a script that needs rewriting (remembered under its original SHA), else null. */
  function remember(src: string): (ScriptEntry & { origSha: string }) | null {
    if (!src.startsWith("#!lua")) return null; // the common case: no hashing needed
    const origSha = sha1(src);
    const known = scripts.get(origSha);
    if (known) return { ...known, origSha };
    const stripped = stripUnknownShebangFlags(src);
    if (stripped === null) return null;
    const entry = { stripped, realSha: sha1(stripped) };
    if (scripts.size >= MAX_SCRIPTS) scripts.delete(scripts.keys().next().value!);
    scripts.set(origSha, entry);
    return { ...entry, origSha };
  }

  /** Rewrites user commands for Redis; see `Plan`. */
  function plan(cmds: string[][]): Plan {
    const p: Plan = { pre: [], wire: [], slot: [], preset: [], post: [], blockMs: -1 };
    for (const args of cmds) {
      const name = args[0]!.toUpperCase();
      let wire: string[] = args;
      let post: ((v: RespValue) => RespValue) | undefined;
      if (notAvailable(name, args)) {
        p.slot.push(-1);
        p.preset.push(new RespError(`ERR Command is not available: '${args[0]!.toLowerCase()}'`));
        p.post.push(undefined);
        continue;
      }
      switch (name) {
        case "EVAL":
        case "EVAL_RO": {
          if (args.length < 2) break;
          const entry = remember(args[1]!);
          if (entry) {
            wire = [args[0]!, entry.stripped, ...args.slice(2)];
            loaded.add(entry.realSha);
          }
          break;
        }
        case "EVALSHA":
        case "EVALSHA_RO": {
          if (args.length < 2) break;
          const entry = scripts.get(args[1]!.toLowerCase());
          if (!entry) break; // unknown here: Redis answers (NOSCRIPT unless loaded directly)
          const { realSha, stripped } = entry;
          if (!loaded.has(realSha)) {
            // Redis lost it (restart): load it back first, in the same write, so order holds.
            p.pre.push(["SCRIPT", "LOAD", stripped]);
            loaded.add(realSha);
          }
          wire = [args[0]!, realSha, ...args.slice(2)];
          post = (v) => {
            // Flushed behind our back: the client gets NOSCRIPT, falls back to EVAL, and the
            // next EVALSHA loads the script again.
            if (v instanceof RespError && v.message.startsWith("NOSCRIPT")) loaded.delete(realSha);
            return v;
          };
          break;
        }
        case "SCRIPT": {
          const sub = (args[1] ?? "").toUpperCase();
          if (sub === "LOAD" && args.length === 3) {
            const entry = remember(args[2]!);
            if (entry) {
              wire = [args[0]!, args[1]!, entry.stripped];
              loaded.add(entry.realSha);
              const answer = Buffer.from(entry.origSha, "latin1");
              post = (v) => (v instanceof Buffer ? answer : v);
            }
          } else if (sub === "EXISTS" && args.length > 2) {
            const shas = args.slice(2).map((s) => s.toLowerCase());
            // Known scripts are runnable by EVALSHA (re-loaded if needed), so they exist.
            post = (v) => (Array.isArray(v) ? v.map((x, i) => (scripts.has(shas[i]!) ? 1 : x)) : v);
          } else if (sub === "FLUSH") {
            scripts.clear();
            loaded.clear();
          }
          break;
        }
        default: {
          const block = blockingMs(name, args);
          if (block > p.blockMs) p.blockMs = block;
        }
      }
      p.slot.push(p.wire.length);
      p.wire.push(wire);
      p.preset.push(undefined);
      p.post.push(post);
    }
    return p;
  }

  /** User command i's reply; `replies[offset + slot]` answers the command at `wire[slot]`. */
  function reply(p: Plan, replies: readonly RespValue[], offset: number, i: number): RespValue {
    const slot = p.slot[i]!;
    if (slot < 0) return p.preset[i]!;
    const v = replies[offset + slot] ?? null;
    const post = p.post[i];
    return post ? post(v) : v;
  }

  /** Runs a plan outside a transaction: shared connection, or a dedicated one if it blocks. */
  async function run(p: Plan, req: Request, server: Bun.Server<undefined>): Promise<RespValue[]> {
    if (p.wire.length === 0) return [];
    const wire = p.pre.length === 0 ? p.wire : [...p.pre, ...p.wire];
    if (p.blockMs < 0) return await client.send(wire);
    const timeout = commandTimeoutMs + p.blockMs;
    // Bun closes connections idle for `idleTimeout` (10 s); a long block must not be cut off.
    if (timeout > 8000) server.timeout(req, 0);
    return await client.withDedicated((conn) => conn.send(wire, timeout));
  }

  async function single(cmd: string[], b64: boolean, req: Request, server: Bun.Server<undefined>): Promise<Out> {
    const p = plan([cmd]);
    const replies = await run(p, req, server);
    const v = reply(p, replies, p.pre.length, 0);
    if (v instanceof RespError) return { status: 400, body: errorBody(v.message) };
    return { status: 200, body: `{"result":${toJson(v, b64)}}` };
  }

  async function pipeline(cmds: string[][], b64: boolean, req: Request, server: Bun.Server<undefined>): Promise<Out> {
    const p = plan(cmds);
    const replies = await run(p, req, server);
    let body = "[";
    for (let i = 0; i < cmds.length; i++)
      body += (i === 0 ? "" : ",") + entryJson(reply(p, replies, p.pre.length, i), b64);
    return { status: 200, body: `${body}]` };
  }

  /**
   * MULTI, the commands, EXEC on a connection of its own, written in one go. Queue-time errors
   * (unknown command, wrong arity) discard the transaction → 400 with one error. Runtime errors
   * (WRONGTYPE) are entries of EXEC's reply; the other commands still apply.
   */
  async function multiExec(cmds: string[][], b64: boolean): Promise<Out> {
    if (cmds.length === 0) return { status: 200, body: "[]" };
    const p = plan(cmds);
    const rejected = p.preset.find((e) => e !== undefined);
    if (rejected) {
      return {
        status: 400,
        body: errorBody(`EXECABORT Transaction discarded because of previous errors: ${rejected.message}`),
      };
    }
    // Helper SCRIPT LOADs go before MULTI; the user's commands between MULTI and EXEC.
    const wire: RespCommand[] = [...p.pre, ["MULTI"], ...p.wire, ["EXEC"]];
    const queuedFrom = p.pre.length + 1;
    const replies = await client.withDedicated((conn: RespConnection) => conn.send(wire));
    for (let i = 0; i < p.wire.length; i++) {
      const q = replies[queuedFrom + i];
      if (q instanceof RespError) {
        return {
          status: 400,
          body: errorBody(`EXECABORT Transaction discarded because of previous errors: ${q.message}`),
        };
      }
    }
    const exec = replies[replies.length - 1] ?? null;
    if (exec instanceof RespError) return { status: 400, body: errorBody(exec.message) };
    if (!Array.isArray(exec)) return { status: 400, body: errorBody("EXECABORT Transaction discarded") };
    let body = "[";
    for (let i = 0; i < cmds.length; i++) {
      const v = exec[i] ?? null;
      const post = p.post[i];
      body += (i === 0 ? "" : ",") + entryJson(post ? post(v) : v, b64);
    }
    return { status: 200, body: `${body}]` };
  }

  function authorized(req: Request, url: string): boolean {
    let header = req.headers.get("authorization");
    if (header === null) {
      // Upstash also accepts ?_token=…
      const q = url.indexOf("?");
      if (q !== -1) {
        const t = new URLSearchParams(url.slice(q + 1)).get("_token");
        if (t !== null) header = `Bearer ${t}`;
      }
      if (header === null) return false;
    }
    // The scheme is case-insensitive (RFC 9110); the token is compared in constant time.
    if (header.length > 7 && header.slice(0, 7).toLowerCase() === "bearer ") header = `Bearer ${header.slice(7)}`;
    const got = Buffer.from(header, "utf8");
    return got.length === expectedAuth.length && timingSafeEqual(got, expectedAuth);
  }

  async function handle(req: Request, server: Bun.Server<undefined>): Promise<Out> {
    const url = req.url;
    // Path without parsing the whole URL: req.url is absolute ("http://host:port/path?query").
    const slash = url.indexOf("/", url.indexOf("//") + 2);
    const q = url.indexOf("?", slash);
    const path = slash === -1 ? "/" : url.slice(slash, q === -1 ? undefined : q);
    const method = req.method;

    if (path === "/" && (method === "GET" || method === "HEAD")) return { status: 200, body: WELCOME };
    const isCommandPath = path === "/" || path === "/pipeline" || path === "/multi-exec";
    const isStandinPath =
      path === "/__standin/stats" || path === "/__standin/stats/reset" || path === "/__standin/limits";
    if (!isCommandPath && !isStandinPath)
      return { status: 404, body: errorBody(`Endpoint not found: ${method} ${path}`) };
    if (!authorized(req, url)) return { status: 401, body: errorBody("Unauthorized") };

    if (isStandinPath) {
      if (path === "/__standin/stats" && method === "GET") return { status: 200, body: JSON.stringify(stats) };
      if (path === "/__standin/stats/reset" && method === "POST") {
        resetStats();
        return { status: 200, body: '{"result":"OK"}' };
      }
      if (path === "/__standin/limits" && method === "GET")
        return { status: 200, body: JSON.stringify({ commandsPerSecond: cap }) };
      if (path === "/__standin/limits" && method === "POST") {
        let raw: unknown;
        try {
          raw = JSON.parse(await req.text());
        } catch {
          return { status: 400, body: errorBody("ERR failed to parse the request body as JSON") };
        }
        const v =
          typeof raw === "object" && raw !== null && "commandsPerSecond" in raw
            ? normalizeCap(raw.commandsPerSecond)
            : undefined;
        if (v === undefined) {
          return {
            status: 400,
            body: errorBody('ERR the body must be {"commandsPerSecond": <positive integer, or null/0 for no cap>}'),
          };
        }
        cap = v;
        return { status: 200, body: JSON.stringify({ commandsPerSecond: cap }) };
      }
      return { status: 405, body: errorBody(`Method not allowed: ${method} ${path}`) };
    }
    if (method !== "POST") return { status: 405, body: errorBody(`Method not allowed: ${method} ${path}, use POST`) };

    let body: unknown;
    try {
      body = JSON.parse(await req.text());
    } catch {
      return { status: 400, body: errorBody("ERR failed to parse the request body as JSON") };
    }
    let cmds: string[][];
    let one: string[] | null = null;
    try {
      if (path === "/") {
        one = toCommand(body, "the body");
        cmds = [one];
      } else {
        if (!Array.isArray(body)) throw new BadRequest("ERR the body must be a JSON array of commands");
        cmds = body.map((c: unknown, i) => toCommand(c, `command ${i}`));
      }
    } catch (e) {
      if (e instanceof BadRequest) return { status: 400, body: errorBody(e.message) };
      throw e;
    }
    if (cmds.length > 0) {
      const throttled = admit(cmds.length);
      if (throttled !== null) return throttled;
    }
    stats.requests++;
    stats.commands += cmds.length;
    stats.byPath[path] = (stats.byPath[path] ?? 0) + 1;

    let reached = 0;
    if (opts.replica) {
      // Empty (a client's first request) or not ours: nothing to wait for.
      const want = Number(req.headers.get("upstash-sync-token") ?? "");
      if (Number.isSafeInteger(want) && want > 0) {
        const at = await catchUp(want);
        if (at === null)
          return {
            status: REPLICA_BEHIND_STATUS,
            body: errorBody(`ERR replica has not reached sync token ${want} within ${maxWaitMs} ms`),
          };
        reached = at;
      }
    }
    const b64 = req.headers.get("upstash-encoding")?.toLowerCase() === "base64";
    const out =
      one !== null
        ? await single(one, b64, req, server)
        : path === "/pipeline"
          ? await pipeline(cmds, b64, req, server)
          : await multiExec(cmds, b64);
    // After the request: a primary's offset then includes its writes; a replica's is what it has read.
    if (offsetTokens) out.sync = String(Math.max(reached, await replicationOffset()));
    return out;
  }

  function respond(out: Out): Response {
    return new Response(out.body, {
      status: out.status,
      headers: { "content-type": "application/json", "upstash-sync-token": out.sync ?? String(++syncToken) },
    });
  }

  const server = Bun.serve({
    hostname: opts.hostname ?? "127.0.0.1",
    port: opts.port ?? 0,
    development: false,
    // Bun's default (10 s) would cut a request off while Redis still has time to answer.
    idleTimeout: Math.min(255, Math.ceil(commandTimeoutMs / 1000) + 5),
    async fetch(req, srv) {
      try {
        return respond(await handle(req, srv));
      } catch (e) {
        if (e instanceof RedisConnectionError)
          return respond({ status: 500, body: errorBody(`ERR redis unavailable: ${e.message}`) });
        return respond({ status: 500, body: errorBody(`ERR stand-in failure: ${(e as Error).message}`) });
      }
    },
    error(e) {
      return respond({ status: 500, body: errorBody(`ERR stand-in failure: ${e.message}`) });
    },
  });

  const port = server.port ?? 0;
  const host = opts.hostname ?? "127.0.0.1";
  return {
    url: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
    port,
    stats: () => ({ ...stats, byPath: { ...stats.byPath } }),
    resetStats,
    limits: () => ({ commandsPerSecond: cap }),
    setLimits: (limits) => {
      const v = normalizeCap(limits.commandsPerSecond);
      if (v === undefined)
        throw new Error(`commandsPerSecond must be a non-negative integer or null, got ${limits.commandsPerSecond}`);
      cap = v;
    },
    stop: async () => {
      await server.stop(true);
      await client.close();
    },
  };
}

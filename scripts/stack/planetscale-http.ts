/**
 * PlanetScale-HTTP stand-in: speaks the `@planetscale/database` wire protocol (see
 * docs/protocols.md §2) in front of a real MariaDB, so the unmodified driver runs locally and in
 * tests exactly as it does against PlanetScale.
 *
 * Design (the invariants the rest of the file relies on):
 * - **Pool vs. sessions.** A request without a bound session runs on a pooled mysql2 connection
 *   in autocommit mode. After it, the server status flags from the OK packet decide whether the
 *   connection may go back to the pool: IN_TRANS set or AUTOCOMMIT cleared (BEGIN, START
 *   TRANSACTION, SET autocommit=0, XA START …) binds it to a fresh session id instead. So do
 *   statements that leave per-connection state behind (SET, USE, LOCK TABLES, CREATE TEMPORARY,
 *   GET_LOCK, PREPARE): such a "sticky" connection would leak that state into unrelated requests
 *   if pooled, and PlanetScale keeps it in the session anyway.
 * - **Only clean connections return to the pool**: not in a transaction, autocommit on, never
 *   sticky. A bound connection is released when a statement's OK packet reports
 *   "no transaction, autocommit on" and the session is not sticky (COMMIT / ROLLBACK / implicit
 *   commit by DDL); otherwise it is held until `idleTimeoutMs` without requests, then rolled back
 *   and closed (never pooled).
 * - **Per-session FIFO.** Requests carrying a bound session are chained on that session's
 *   promise tail, so concurrent `tx.execute` calls (`Promise.all`) run one after another in
 *   arrival order on the one connection. Requests whose session is not (or no longer) bound run
 *   in parallel on the pool: a global `connect()` Connection shared by concurrent handlers must
 *   not be serialised.
 * - **Expired transactions fail loudly.** When a session is closed by the idle timeout (or its
 *   connection dies) while a transaction is open, its id is remembered; the next statement with
 *   it gets an ABORTED error instead of silently running in autocommit mode (ROLLBACK is accepted).
 * - **Nothing outlives its client or its timeout (fidelity choice).** As Vitess does when a
 *   request's context is cancelled, a client that aborts its HTTP request ends that request's
 *   work: a running statement is stopped (KILL QUERY on its MariaDB thread, sent on a separate
 *   admin connection outside the pool), a session it belongs to is rolled back and its connection
 *   closed, and a request still waiting for a pooled connection gives it back unused. A
 *   transaction open longer than `transactionTimeoutMs` (PlanetScale's per-transaction timeout,
 *   20 s) is ended the same way, busy or idle. A connection a KILL was aimed at is never pooled
 *   again (the KILL could land after its statement ended).
 * - **Raw bytes.** mysql2 runs with `typeCast: false` + `rowsAsArray`, so every value arrives as
 *   the exact text-protocol bytes (no JS Date, no float/BigInt rounding) and is re-encoded as
 *   `{lengths, values: base64}` without decoding.
 * - **JSON.** MariaDB sends JSON as LONGTEXT, but mysql2 negotiates MariaDB's extended column
 *   metadata, where JSON columns and JSON-returning expressions (JSON_OBJECT, …) carry
 *   `format=json`. Those fields are reported as type JSON, charset 63 (as MySQL 8 does), so the
 *   driver parses them into objects.
 * - **Never crash on input.** Every request path returns a JSON response; SQL errors are HTTP 200
 *   with an `error` object (as PlanetScale does), bad requests 400, bad credentials 401.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { createConnection, createPool, type Pool, type PoolOptions } from "mysql2";

export interface PlanetscaleHttpOptions {
  mysql: { host: string; port: number; user: string; password: string };
  /** Default database of every connection (the driver never sends one; see docs/protocols.md §2.9). */
  database: string;
  /** Basic-auth credentials clients must send (compared after percent-decoding). */
  username: string;
  password: string;
  /** 0 / undefined = a free port chosen by the kernel. */
  port?: number;
  /** Listen address; default 127.0.0.1. */
  hostname?: string;
  /** A bound session with no request for this long is rolled back and closed. Default 30000. */
  idleTimeoutMs?: number;
  /**
   * A transaction open this long (from BEGIN, whether busy or idle) is rolled back and its session
   * closed, its running statement killed. Default 20000 (PlanetScale's per-transaction timeout).
   */
  transactionTimeoutMs?: number;
  /** A result with more rows is an error, as on PlanetScale. Default 100000. */
  maxRows?: number;
  /** Upper bound of MariaDB connections (pooled + bound to sessions). Default DEFAULT_CONNECTION_LIMIT. */
  connectionLimit?: number;
}

export interface PlanetscaleHttpServer {
  /** `http://username:password@127.0.0.1:port`, credentials percent-encoded: pass to `connect({ url })`. */
  url: string;
  port: number;
  /**
   * `requests`: HTTP requests served so far; `sessions`: sessions currently holding a connection;
   * `killed`: statements stopped and sessions ended because their client went away or their
   * transaction timed out.
   */
  stats(): { requests: number; sessions: number; killed: number };
  /** Stops listening, closes every bound session (rolling back) and the pool. Idempotent. */
  stop(): Promise<void>;
}

// ---- mysql2 shapes (the slice used; mysql2's own typings are too loose for rowsAsArray+typeCast:false)

interface RawField {
  name: string;
  columnType: number;
  flags: number;
  characterSet: number;
  columnLength: number;
  decimals: number;
  table: string;
  orgTable: string;
  schema: string;
  orgName: string;
  /** From MariaDB extended metadata; "json" for JSON columns and expressions. */
  extendedFormat?: string;
}

interface RawOk {
  affectedRows: number | string;
  insertId: number | string;
  serverStatus?: number;
}

interface RawError {
  message: string;
  errno?: number;
  sqlState?: string;
  sqlMessage?: string;
  code?: string;
  fatal?: boolean;
}

type RawRow = Array<Buffer | null>;

interface RawConn {
  /** The MariaDB thread (connection) id: the target of KILL QUERY. */
  threadId: number;
  query(
    opts: { sql: string; rowsAsArray: boolean; typeCast: boolean },
    cb: (err: RawError | null, res: unknown, fields?: RawField[]) => void,
  ): void;
  release(): void;
  destroy(): void;
  on(event: "error", fn: (err: RawError) => void): unknown;
}

type QueryOutcome =
  | { kind: "ok"; ok: RawOk }
  | { kind: "rows"; rows: RawRow[]; fields: RawField[] }
  | { kind: "error"; error: RawError };

// ---- wire shapes (docs/protocols.md §2.3): proto3 JSON, 64-bit ints as strings, zero values omitted

interface WireField {
  name: string;
  type?: string;
  table?: string;
  orgTable?: string;
  database?: string;
  orgName?: string;
  columnLength?: number;
  charset?: number;
  flags?: number;
  decimals?: number;
}

interface WireResult {
  rowsAffected?: string;
  insertId?: string;
  fields?: WireField[];
  rows?: Array<{ lengths: string[]; values?: string }>;
}

interface WireError {
  code: string;
  message: string;
}

interface WireSession {
  signature: string;
  vitessSession: Record<string, unknown>;
}

interface ExecOutcome {
  session: WireSession;
  result?: WireResult;
  error?: WireError;
}

/** A MariaDB connection bound to a session id (see the file comment for the lifecycle). */
interface Bound {
  id: string;
  conn: RawConn;
  inTransaction: boolean;
  autocommit: boolean;
  /** The connection carries session state (SET/USE/…): it is never returned to the pool. */
  sticky: boolean;
  /** Set once the connection was released/closed; queued work then re-dispatches by id. */
  released: boolean;
  /** Tail of the FIFO of requests on this session; never rejects. */
  tail: Promise<void>;
  pending: number;
  timer: ReturnType<typeof setTimeout> | undefined;
  /** The transaction timeout, armed while a transaction is open. */
  txTimer: ReturnType<typeof setTimeout> | undefined;
  /** A statement of this session is running on the connection now. */
  running: boolean;
  lastInsertId: string | undefined;
}

// MySQL server status flags (OK packet).
const SERVER_STATUS_IN_TRANS = 0x0001;
const SERVER_STATUS_AUTOCOMMIT = 0x0002;

// MySQL column flags used to refine the type name (Vitess MySQLToType).
const UNSIGNED_FLAG = 32;
const BINARY_FLAG = 128;
const ENUM_FLAG = 256;
const SET_FLAG = 2048;
const BINARY_CHARSET = 63;

const MAX_TOMBSTONES = 10_000;

/** MariaDB connections a stand-in uses at most (pooled + bound), unless told otherwise. */
export const DEFAULT_CONNECTION_LIMIT = 64;

/** The answer to a request whose client went away (nobody reads it; vtrpc CANCELED). */
const CLIENT_GONE: WireError = { code: "CANCELED", message: "the client went away; the statement was not completed" };

/** MySQL column type code + flags → Vitess type name (docs/protocols.md §2.4). `undefined` = NULL_TYPE. */
export function vitessTypeName(
  f: Pick<RawField, "columnType" | "flags" | "characterSet" | "extendedFormat">,
): string | undefined {
  if (f.extendedFormat === "json") return "JSON";
  const unsigned = (f.flags & UNSIGNED_FLAG) !== 0;
  const binary = (f.flags & BINARY_FLAG) !== 0;
  switch (f.columnType) {
    case 0:
    case 246:
      return "DECIMAL";
    case 1:
      return unsigned ? "UINT8" : "INT8";
    case 2:
      return unsigned ? "UINT16" : "INT16";
    case 9:
      return unsigned ? "UINT24" : "INT24";
    case 3:
      return unsigned ? "UINT32" : "INT32";
    case 8:
      return unsigned ? "UINT64" : "INT64";
    case 4:
      return "FLOAT32";
    case 5:
      return "FLOAT64";
    case 6:
      return undefined;
    case 7:
      return "TIMESTAMP";
    case 10:
    case 14: // NEWDATE, internal but harmless
      return "DATE";
    case 11:
      return "TIME";
    case 12:
      return "DATETIME";
    case 13:
      return "YEAR";
    case 16:
      return "BIT";
    case 245:
      return "JSON";
    case 247:
      return "ENUM";
    case 248:
      return "SET";
    case 255:
      return "GEOMETRY";
    case 15:
    case 253:
      return binary ? "VARBINARY" : "VARCHAR";
    case 254:
      if (f.flags & ENUM_FLAG) return "ENUM";
      if (f.flags & SET_FLAG) return "SET";
      return binary ? "BINARY" : "CHAR";
    case 249:
    case 250:
    case 251:
    case 252:
      return binary ? "BLOB" : "TEXT";
    default:
      return f.characterSet === BINARY_CHARSET ? "VARBINARY" : "VARCHAR";
  }
}

function wireField(f: RawField): WireField {
  const type = vitessTypeName(f);
  // MySQL 8 reports JSON with the binary charset; keep that so the shape matches PlanetScale.
  const charset = type === "JSON" ? BINARY_CHARSET : f.characterSet;
  const out: WireField = { name: f.name };
  if (type !== undefined) out.type = type;
  if (f.table) out.table = f.table;
  if (f.orgTable) out.orgTable = f.orgTable;
  if (f.schema) out.database = f.schema;
  if (f.orgName) out.orgName = f.orgName;
  if (f.columnLength) out.columnLength = f.columnLength;
  if (charset) out.charset = charset;
  if (f.flags) out.flags = f.flags;
  if (f.decimals) out.decimals = f.decimals;
  return out;
}

function wireRow(row: RawRow): { lengths: string[]; values?: string } {
  const lengths: string[] = new Array(row.length);
  const parts: Buffer[] = [];
  let total = 0;
  for (let i = 0; i < row.length; i++) {
    const v = row[i];
    if (v === null || v === undefined) {
      lengths[i] = "-1";
    } else {
      lengths[i] = String(v.length);
      total += v.length;
      parts.push(v);
    }
  }
  // proto3 omits empty bytes; the driver copes with a missing `values`.
  if (total === 0) return { lengths };
  return { lengths, values: Buffer.concat(parts, total).toString("base64") };
}

/** uint64 text of a mysql2 OK-packet number (insertId is read signed by mysql2; undo that). */
function u64(x: number | string): string {
  if (typeof x === "number" && x >= 0) return String(x);
  try {
    return BigInt.asUintN(64, BigInt(x)).toString();
  } catch {
    return String(x);
  }
}

/** vtrpc code for a MySQL errno, as Vitess maps them (approximately). */
function vtrpcCode(errno: number | undefined): string {
  switch (errno) {
    case 1062: // ER_DUP_ENTRY
    case 1050: // ER_TABLE_EXISTS_ERROR
    case 1007: // ER_DB_CREATE_EXISTS
      return "ALREADY_EXISTS";
    case 1146: // ER_NO_SUCH_TABLE
    case 1049: // ER_BAD_DB_ERROR
      return "NOT_FOUND";
    case 1064: // ER_PARSE_ERROR
    case 1054: // ER_BAD_FIELD_ERROR
    case 1048: // ER_BAD_NULL_ERROR
    case 1136: // ER_WRONG_VALUE_COUNT_ON_ROW
    case 1264: // ER_WARN_DATA_OUT_OF_RANGE
    case 1292: // ER_TRUNCATED_WRONG_VALUE
    case 1364: // ER_NO_DEFAULT_FOR_FIELD
    case 1366: // ER_TRUNCATED_WRONG_VALUE_FOR_FIELD
    case 1406: // ER_DATA_TOO_LONG
    case 1451: // ER_ROW_IS_REFERENCED_2
    case 1452: // ER_NO_REFERENCED_ROW_2
    case 3140: // ER_INVALID_JSON_TEXT
    case 4025: // ER_CONSTRAINT_FAILED (MariaDB CHECK)
      return "INVALID_ARGUMENT";
    case 1213: // ER_LOCK_DEADLOCK
      return "ABORTED";
    case 1205: // ER_LOCK_WAIT_TIMEOUT
      return "DEADLINE_EXCEEDED";
    case 1317: // ER_QUERY_INTERRUPTED
      return "CANCELED";
    case 1044:
    case 1045:
    case 1142:
    case 1143:
      return "PERMISSION_DENIED";
    case 1290: // ER_OPTION_PREVENTS_STATEMENT (read only)
    case 1792: // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
      return "FAILED_PRECONDITION";
    default:
      return "UNKNOWN";
  }
}

function wireError(e: RawError): WireError {
  if (e.errno !== undefined && e.sqlState !== undefined) {
    // Apps and ORM adapters regex the errno out of this exact Vitess-style suffix.
    return {
      code: vtrpcCode(e.errno),
      message: `${e.sqlMessage ?? e.message} (errno ${e.errno}) (sqlstate ${e.sqlState})`,
    };
  }
  // No server errno: the connection itself failed (refused, lost, closed).
  return { code: "UNAVAILABLE", message: `mysql: ${e.message}${e.code ? ` (${e.code})` : ""}` };
}

// ---- statement classification (only the head of the SQL is inspected)

function isSpace(c: number): boolean {
  return c === 32 || (c >= 9 && c <= 13);
}

/** Skips leading whitespace and comments (not `/*!` executable comments) and returns the rest. */
export function statementHead(sql: string): string {
  let i = 0;
  const n = sql.length;
  for (;;) {
    while (i < n && isSpace(sql.charCodeAt(i))) i++;
    if (sql.startsWith("/*", i) && !sql.startsWith("/*!", i)) {
      const end = sql.indexOf("*/", i + 2);
      if (end < 0) return "";
      i = end + 2;
    } else if (sql.startsWith("#", i) || (sql.startsWith("--", i) && (i + 2 >= n || isSpace(sql.charCodeAt(i + 2))))) {
      const nl = sql.indexOf("\n", i);
      if (nl < 0) return "";
      i = nl + 1;
    } else {
      return sql.slice(i, i + 256);
    }
  }
}

/** PlanetScale-only statements that ps-http-sim also accepts and ignores. */
const IGNORED = [/^set\s+(?:@@(?:session\.)?)?boost_cached_queries\b/i, /^use\s+[^;]*@/i];
const BEGIN = /^(?:begin|start\s+transaction)\b/i;
const ROLLBACK = /^rollback\b/i;
/** Statements that leave per-connection state behind (see "sticky" in the file comment). */
const STICKY_HEAD = /^(?:set|use|lock|prepare|create\s+(?:or\s+replace\s+)?temporary)\b/i;
const STICKY_ANYWHERE = /\bget_lock\s*\(/i;

interface Classified {
  ignored: boolean;
  begin: boolean;
  rollback: boolean;
  sticky: boolean;
}

export function classify(sql: string): Classified {
  const head = statementHead(sql);
  const ignored = IGNORED.some((re) => re.test(head));
  return {
    ignored,
    begin: BEGIN.test(head),
    rollback: ROLLBACK.test(head),
    sticky: !ignored && (STICKY_HEAD.test(head) || STICKY_ANYWHERE.test(sql)),
  };
}

function decodeCredential(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s; // not percent-encoded (or malformed): compare as sent
  }
}

/** Parses `Authorization: Basic …`; undefined when absent or malformed. */
function basicAuth(header: string | null): { user: string; pass: string } | undefined {
  if (!header) return undefined;
  const m = /^Basic\s+([A-Za-z0-9+/=_-]+)\s*$/i.exec(header);
  if (!m || m[1] === undefined) return undefined;
  let decoded: string;
  try {
    decoded = Buffer.from(m[1], "base64").toString("utf8");
  } catch {
    return undefined;
  }
  const colon = decoded.indexOf(":");
  if (colon < 0) return undefined;
  return { user: decodeCredential(decoded.slice(0, colon)), pass: decodeCredential(decoded.slice(colon + 1)) };
}

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json" } });
}

function httpError(status: number, code: string, message: string): Response {
  return json({ error: { code, message } }, status);
}

export async function startPlanetscaleHttp(opts: PlanetscaleHttpOptions): Promise<PlanetscaleHttpServer> {
  const idleTimeoutMs = opts.idleTimeoutMs ?? 30_000;
  const transactionTimeoutMs = opts.transactionTimeoutMs ?? 20_000;
  const maxRows = opts.maxRows ?? 100_000;
  const hostname = opts.hostname ?? "127.0.0.1";
  // Opaque to the driver; one random value per server instance is enough.
  const signature = randomBytes(24).toString("base64");

  const poolOptions: PoolOptions = {
    host: opts.mysql.host,
    port: opts.mysql.port,
    user: opts.mysql.user,
    password: opts.mysql.password,
    database: opts.database,
    connectionLimit: opts.connectionLimit ?? DEFAULT_CONNECTION_LIMIT,
    maxIdle: 16,
    idleTimeout: 60_000,
    // Values stay raw bytes (typeCast false); OK-packet numbers above 2^53 come as strings.
    supportBigNumbers: true,
    bigNumberStrings: true,
    multipleStatements: false,
    enableKeepAlive: true,
    // mysql2's default client flags include FOUND_ROWS: UPDATE reports *matched* rows, which is
    // what PlanetScale's session option clientFoundRows=true gives. Kept on purpose.
  };
  const pool: Pool = createPool(poolOptions);

  const bound = new Map<string, Bound>();
  /** Ids of sessions that lost an open transaction (idle timeout / dead connection) → reason. */
  const tombstones = new Map<string, string>();
  const guarded = new WeakSet<RawConn>();
  let requests = 0;
  let killed = 0;
  let stopping = false;
  /** The connection KILL QUERY is sent on: outside the pool, so a full pool cannot delay it. */
  let admin: RawConn | undefined;

  function acquire(): Promise<{ conn: RawConn } | { error: RawError }> {
    return new Promise((resolve) => {
      pool.getConnection((err, conn) => {
        if (err) return resolve({ error: err as unknown as RawError });
        const raw = conn as unknown as RawConn;
        if (!guarded.has(raw)) {
          guarded.add(raw);
          // An idle connection whose server goes away emits 'error'; unhandled it would crash
          // the process. The next query on it fails and is handled there.
          raw.on("error", () => {});
        }
        resolve({ conn: raw });
      });
    });
  }

  function runQuery(conn: RawConn, sql: string): Promise<QueryOutcome> {
    return new Promise((resolve) => {
      try {
        conn.query({ sql, rowsAsArray: true, typeCast: false }, (err, res, fields) => {
          if (err) return resolve({ kind: "error", error: err });
          if (Array.isArray(res) && fields !== undefined) {
            return resolve({ kind: "rows", rows: res as RawRow[], fields });
          }
          resolve({ kind: "ok", ok: res as RawOk });
        });
      } catch (e) {
        resolve({ kind: "error", error: { message: (e as Error).message, fatal: true } });
      }
    });
  }

  function sessionJson(id: string, b?: Bound): WireSession {
    const vs: Record<string, unknown> = {
      autocommit: b ? b.autocommit : true,
      targetString: opts.database,
      options: { includedFields: "ALL", clientFoundRows: true },
      DDLStrategy: "direct",
      SessionUUID: id,
      enableSystemSettings: true,
    };
    if (b && !b.released && b.inTransaction) vs.inTransaction = true;
    if (b?.lastInsertId) vs.lastInsertId = b.lastInsertId;
    return { signature, vitessSession: vs };
  }

  function sessionIdOf(session: unknown): string | undefined {
    if (typeof session !== "object" || session === null) return undefined;
    const vs = (session as { vitessSession?: unknown }).vitessSession;
    if (typeof vs !== "object" || vs === null) return undefined;
    const id = (vs as { SessionUUID?: unknown }).SessionUUID;
    return typeof id === "string" && id.length > 0 && id.length <= 128 ? id : undefined;
  }

  function rememberLost(id: string, reason: string): void {
    tombstones.set(id, reason);
    if (tombstones.size > MAX_TOMBSTONES) {
      const oldest = tombstones.keys().next().value;
      if (oldest !== undefined) tombstones.delete(oldest);
    }
  }

  /**
   * Ends a bound connection that may hold an open transaction. An explicit ROLLBACK releases row
   * locks before the server notices the closed socket; destroy regardless of its outcome, and
   * never wait more than a second for it.
   */
  function rollbackAndClose(conn: RawConn): void {
    const timer = setTimeout(() => conn.destroy(), 1000);
    void runQuery(conn, "ROLLBACK").then(() => {
      clearTimeout(timer);
      conn.destroy();
    });
  }

  /** Stops the statement running on `conn` (its connection must then never be pooled again). */
  function killQuery(conn: RawConn): void {
    killed++;
    if (!admin) {
      const c = createConnection({
        host: opts.mysql.host,
        port: opts.mysql.port,
        user: opts.mysql.user,
        password: opts.mysql.password,
      });
      admin = c as unknown as RawConn;
      c.on("error", () => {
        if (admin === (c as unknown as RawConn)) admin = undefined;
      });
    }
    const target = admin;
    void runQuery(target, `KILL QUERY ${Number(conn.threadId)}`).then((out) => {
      if (out.kind === "error" && out.error.fatal && admin === target) {
        admin = undefined;
        target.destroy();
      }
    });
  }

  /**
   * Ends a session now (its client went away, or its transaction timed out): the running statement
   * is killed, the transaction rolled back and the connection closed; later requests with its id
   * get the tombstone's ABORTED error.
   */
  function abortSession(b: Bound, reason: string): void {
    if (b.released) return;
    unbind(b);
    if (b.inTransaction) rememberLost(b.id, reason);
    if (b.running) killQuery(b.conn);
    else killed++;
    rollbackAndClose(b.conn);
  }

  function setInTransaction(b: Bound, open: boolean): void {
    b.inTransaction = open;
    if (!open && b.txTimer !== undefined) {
      clearTimeout(b.txTimer);
      b.txTimer = undefined;
    } else if (open && b.txTimer === undefined) {
      b.txTimer = setTimeout(() => {
        b.txTimer = undefined;
        abortSession(b, `transaction rolled back: open for more than ${transactionTimeoutMs} ms (transaction timeout)`);
      }, transactionTimeoutMs);
      (b.txTimer as { unref?: () => void }).unref?.();
    }
  }

  function armTimer(b: Bound): void {
    if (b.timer !== undefined) clearTimeout(b.timer);
    b.timer = setTimeout(() => expire(b), idleTimeoutMs);
    (b.timer as { unref?: () => void }).unref?.();
  }

  function expire(b: Bound): void {
    b.timer = undefined;
    if (b.released || b.pending > 0) return;
    unbind(b);
    if (b.inTransaction) rememberLost(b.id, `transaction rolled back: session idle for more than ${idleTimeoutMs} ms`);
    rollbackAndClose(b.conn);
  }

  function unbind(b: Bound): void {
    b.released = true;
    if (b.timer !== undefined) clearTimeout(b.timer);
    b.timer = undefined;
    if (b.txTimer !== undefined) clearTimeout(b.txTimer);
    b.txTimer = undefined;
    bound.delete(b.id);
  }

  function bind(conn: RawConn, status: number | undefined, sticky: boolean, insertId: string | undefined): Bound {
    const b: Bound = {
      id: randomUUID(),
      conn,
      inTransaction: false,
      autocommit: status === undefined || (status & SERVER_STATUS_AUTOCOMMIT) !== 0,
      sticky,
      released: false,
      tail: Promise.resolve(),
      pending: 0,
      timer: undefined,
      txTimer: undefined,
      running: false,
      lastInsertId: insertId,
    };
    // Without status (a SELECT), only a sticky statement gets here: assume nothing open.
    setInTransaction(b, status !== undefined && (status & SERVER_STATUS_IN_TRANS) !== 0);
    bound.set(b.id, b);
    armTimer(b);
    return b;
  }

  function okResult(ok: RawOk): WireResult {
    const r: WireResult = {};
    const affected = u64(ok.affectedRows);
    const insertId = u64(ok.insertId);
    if (affected !== "0") r.rowsAffected = affected;
    if (insertId !== "0") r.insertId = insertId;
    return r;
  }

  /** Converts a query outcome to the wire result, enforcing maxRows. */
  function toWire(out: QueryOutcome): { result?: WireResult; error?: WireError } {
    if (out.kind === "error") return { error: wireError(out.error) };
    if (out.kind === "ok") return { result: okResult(out.ok) };
    if (out.rows.length > maxRows) {
      return { error: { code: "ABORTED", message: `Row count exceeded ${maxRows} (errno 10001) (sqlstate HY000)` } };
    }
    const result: WireResult = { fields: out.fields.map(wireField) };
    if (out.rows.length > 0) result.rows = out.rows.map(wireRow);
    return { result };
  }

  /**
   * Runs on a pooled connection; binds it to a new session when it must not go back. A client
   * that went away (`signal`) before the connection came gets nothing run; one that goes away
   * during the statement has it killed, and its connection is closed, never bound or pooled.
   */
  async function runPooled(id: string, sql: string, cls: Classified, signal: AbortSignal): Promise<ExecOutcome> {
    const got = await acquire();
    if ("error" in got) return { session: sessionJson(id), error: wireError(got.error) };
    const conn = got.conn;
    if (signal.aborted) {
      conn.release();
      return { session: sessionJson(id), error: CLIENT_GONE };
    }
    let tainted = false;
    const onAbort = () => {
      tainted = true;
      killQuery(conn);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    const out = await runQuery(conn, sql);
    signal.removeEventListener("abort", onAbort);
    if (tainted) {
      rollbackAndClose(conn);
      return { session: sessionJson(id), error: CLIENT_GONE };
    }
    if (out.kind === "error") {
      if (out.error.fatal) conn.destroy();
      else conn.release();
      return { session: sessionJson(id), ...toWire(out) };
    }
    const status = out.kind === "ok" ? out.ok.serverStatus : undefined;
    const opened =
      cls.begin ||
      (status !== undefined && ((status & SERVER_STATUS_IN_TRANS) !== 0 || (status & SERVER_STATUS_AUTOCOMMIT) === 0));
    if (opened || cls.sticky) {
      const insertId = out.kind === "ok" ? u64(out.ok.insertId) : undefined;
      const b = bind(conn, status, cls.sticky, insertId !== "0" ? insertId : undefined);
      if (cls.begin) setInTransaction(b, true);
      return { session: sessionJson(b.id, b), ...toWire(out) };
    }
    conn.release();
    return { session: sessionJson(id), ...toWire(out) };
  }

  /** Runs on a bound session's connection; called strictly one at a time per session. */
  async function runBound(b: Bound, sql: string, cls: Classified, signal: AbortSignal): Promise<ExecOutcome> {
    // Released by an earlier queued request (COMMIT) or expired: route by id again, in order.
    if (b.released) return await dispatch(b.id, sql, cls, signal);
    b.running = true;
    const out = await runQuery(b.conn, sql);
    b.running = false;
    // Ended meanwhile (its client went away, or the transaction timeout): the connection is no
    // longer this session's, and the statement's effect is rolled back with it.
    if (b.released) {
      const reason = tombstones.get(b.id) ?? "session closed while the statement ran";
      return {
        session: sessionJson(b.id),
        error: { code: "ABORTED", message: `${reason} (errno 1213) (sqlstate 40001)` },
      };
    }
    if (out.kind === "error") {
      if (out.error.fatal) {
        unbind(b);
        b.conn.destroy();
        if (b.inTransaction) rememberLost(b.id, `transaction lost: ${out.error.message}`);
        return { session: sessionJson(b.id), ...toWire(out) };
      }
      return { session: sessionJson(b.id, b), ...toWire(out) };
    }
    if (cls.sticky) b.sticky = true;
    if (out.kind === "ok") {
      const status = out.ok.serverStatus;
      if (status !== undefined) {
        setInTransaction(b, (status & SERVER_STATUS_IN_TRANS) !== 0);
        b.autocommit = (status & SERVER_STATUS_AUTOCOMMIT) !== 0;
      }
      const insertId = u64(out.ok.insertId);
      if (insertId !== "0") b.lastInsertId = insertId;
      if (!b.inTransaction && b.autocommit && !b.sticky) {
        unbind(b);
        b.conn.release();
        return { session: sessionJson(b.id), ...toWire(out) };
      }
    }
    return { session: sessionJson(b.id, b), ...toWire(out) };
  }

  /**
   * Appends work to the session's FIFO; the idle timer only runs while nothing is queued. A client
   * that goes away before its answer (queued or running) ends the session (abortSession).
   */
  function enqueue(b: Bound, task: () => Promise<ExecOutcome>, signal: AbortSignal): Promise<ExecOutcome> {
    const onAbort = () =>
      abortSession(b, "transaction rolled back: the client went away before its statement's answer");
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    b.pending++;
    if (b.timer !== undefined) {
      clearTimeout(b.timer);
      b.timer = undefined;
    }
    const run = b.tail.then(task);
    b.tail = run.then(
      () => {},
      () => {},
    );
    return run.finally(() => {
      signal.removeEventListener("abort", onAbort);
      b.pending--;
      if (b.pending === 0 && !b.released) armTimer(b);
    });
  }

  async function dispatch(
    id: string | undefined,
    sql: string,
    cls: Classified,
    signal: AbortSignal,
  ): Promise<ExecOutcome> {
    if (id !== undefined) {
      const b = bound.get(id);
      if (b) {
        if (cls.ignored) return { session: sessionJson(b.id, b), result: {} };
        return await enqueue(b, () => runBound(b, sql, cls, signal), signal);
      }
      const lost = tombstones.get(id);
      if (lost !== undefined) {
        tombstones.delete(id);
        // A fresh id: the lost transaction must not be mistaken for a live one again.
        const fresh = randomUUID();
        if (cls.rollback) return { session: sessionJson(fresh), result: {} };
        return {
          session: sessionJson(fresh),
          error: { code: "ABORTED", message: `${lost} (errno 1213) (sqlstate 40001)` },
        };
      }
    }
    const sid = id ?? randomUUID();
    if (cls.ignored) return { session: sessionJson(sid), result: {} };
    return await runPooled(sid, sql, cls, signal);
  }

  async function handleExecute(req: Request): Promise<Response> {
    let body: unknown;
    try {
      body = await req.json();
    } catch (e) {
      return httpError(400, "invalid_argument", `malformed request body: ${(e as Error).message}`);
    }
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      return httpError(400, "invalid_argument", "request body must be a JSON object");
    }
    const { query, session } = body as { query?: unknown; session?: unknown };
    if (typeof query !== "string" || query.trim() === "") {
      return httpError(400, "invalid_argument", "`query` must be a non-empty string");
    }
    const started = performance.now();
    const out = await dispatch(sessionIdOf(session), query, classify(query), req.signal);
    return json({ ...out, timing: (performance.now() - started) / 1000 });
  }

  async function handle(req: Request): Promise<Response> {
    requests++;
    const path = new URL(req.url).pathname;
    const isExecute = path === "/psdb.v1alpha1.Database/Execute";
    const isCreate = path === "/psdb.v1alpha1.Database/CreateSession";
    if (!isExecute && !isCreate) return httpError(404, "not_found", `no route for ${path}`);
    if (req.method !== "POST") return httpError(405, "invalid_argument", "only POST is supported");
    const cred = basicAuth(req.headers.get("authorization"));
    if (!cred || cred.user !== opts.username || cred.pass !== opts.password) {
      return httpError(401, "unauthenticated", "invalid or missing basic-auth credentials");
    }
    if (stopping) return httpError(503, "unavailable", "server is stopping");
    if (isCreate) {
      return json({
        branch: opts.database,
        user: { username: opts.username, psid: "planetscale-http-standin" },
        session: sessionJson(randomUUID()),
      });
    }
    return await handleExecute(req);
  }

  // Fail fast on a wrong MariaDB address, credentials or database rather than on first request.
  const probe = await acquire();
  if ("error" in probe) {
    await new Promise<void>((r) => pool.end(() => r()));
    throw new Error(`planetscale-http: cannot connect to MariaDB: ${probe.error.message}`);
  }
  const probed = await runQuery(probe.conn, "SELECT 1");
  probe.conn.release();
  if (probed.kind === "error") {
    await new Promise<void>((r) => pool.end(() => r()));
    throw new Error(`planetscale-http: MariaDB probe failed: ${probed.error.message}`);
  }

  const server = Bun.serve({
    port: opts.port ?? 0,
    hostname,
    async fetch(req) {
      try {
        return await handle(req);
      } catch (e) {
        return httpError(500, "internal", `planetscale-http: ${(e as Error).message}`);
      }
    },
    error(e) {
      return httpError(500, "internal", `planetscale-http: ${e.message}`);
    },
  });
  const port = server.port ?? 0;
  const urlHost = hostname === "0.0.0.0" || hostname === "::" ? "127.0.0.1" : hostname;

  let stopped: Promise<void> | undefined;
  return {
    url: `http://${encodeURIComponent(opts.username)}:${encodeURIComponent(opts.password)}@${urlHost}:${port}`,
    port,
    stats: () => ({ requests, sessions: bound.size, killed }),
    stop() {
      stopped ??= (async () => {
        stopping = true;
        await server.stop(true);
        for (const b of [...bound.values()]) {
          unbind(b);
          b.conn.destroy(); // closing the socket rolls back on the server
        }
        admin?.destroy();
        admin = undefined;
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, 2000);
          pool.end(() => {
            clearTimeout(t);
            resolve();
          });
        });
      })();
      return stopped;
    },
  };
}

/**
 * The PlanetScale-HTTP stand-in, exercised only through the unmodified `@planetscale/database`
 * driver (and raw fetch for the malformed-request cases), in front of a private MariaDB.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client, connect, DatabaseError, type Connection } from "@planetscale/database";
import { createConnection } from "mysql2/promise";
import { startMariadb, type MariaEngine } from "../../scripts/stack/engines.ts";
import { startPlanetscaleHttp, type PlanetscaleHttpServer } from "../../scripts/stack/planetscale-http.ts";

const DB = "ps_standin_test";
const USER = "app user";
// Characters that must be percent-encoded in the URL: proves the server decodes before comparing.
const PASS = "p@ss/w%rd:1";

let dir: string;
let maria: MariaEngine;
let ps: PlanetscaleHttpServer;
/** A second stand-in with tiny limits, for idle-timeout and maxRows behaviour. */
let tight: PlanetscaleHttpServer;
/** A third with a short transaction timeout (and the default idle timeout). */
let timed: PlanetscaleHttpServer;

/** A plain MariaDB connection to the test database, beside the stand-in. */
async function mysqlDirect() {
  return await createConnection({
    host: maria.host,
    port: maria.port,
    user: maria.user,
    password: maria.password,
    database: DB,
  });
}

/** Statements running right now on MariaDB whose text starts with `head` (the server's process list). */
async function runningNow(via: Awaited<ReturnType<typeof mysqlDirect>>, head: string): Promise<number> {
  const [rows] = await via.query(
    "SELECT COUNT(*) AS n FROM information_schema.processlist WHERE command = 'Query' AND LEFT(info, ?) = ?",
    [head.length, head],
  );
  return Number((rows as Array<{ n: number }>)[0]?.n);
}

/** Polls `check` until it holds (throws after 10 s). */
async function eventually(what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await Bun.sleep(20);
  }
}

function conn(url = ps.url): Connection {
  return connect({ url, fetch });
}

/** Rejection of `p` as a DatabaseError (fails the test if it resolves or throws something else). */
async function dbError(p: Promise<unknown>): Promise<DatabaseError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(DatabaseError);
    return e as DatabaseError;
  }
  throw new Error("expected a DatabaseError, but the call succeeded");
}

async function post(path: string, body: string, auth = true): Promise<Response> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (auth) headers.authorization = `Basic ${btoa(`${encodeURIComponent(USER)}:${encodeURIComponent(PASS)}`)}`;
  return await fetch(`http://127.0.0.1:${ps.port}${path}`, { method: "POST", headers, body });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "ps-http-test-"));
  maria = await startMariadb({ dir });
  const admin = await createConnection({
    host: maria.host,
    port: maria.port,
    user: maria.user,
    password: maria.password,
  });
  await admin.query(`CREATE DATABASE ${DB} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci`);
  await admin.query(`USE ${DB}`);
  await admin.query(`CREATE TABLE kinds (
      id INT NOT NULL PRIMARY KEY,
      flag TINYINT(1) NOT NULL,
      big BIGINT NOT NULL,
      ubig BIGINT UNSIGNED NOT NULL,
      price DECIMAL(20,6) NOT NULL,
      day DATE NOT NULL,
      at DATETIME(6) NOT NULL,
      dur TIME NOT NULL,
      ratio DOUBLE NOT NULL,
      mood ENUM('happy','sad') NOT NULL,
      label VARCHAR(100) NOT NULL,
      note TEXT NULL,
      raw VARBINARY(16) NOT NULL,
      blobby BLOB NOT NULL,
      doc JSON NOT NULL
    )`);
  await admin.query(`CREATE TABLE items (
      id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
      name VARCHAR(64) NOT NULL UNIQUE,
      qty INT NOT NULL DEFAULT 0
    )`);
  await admin.end();
  const mysql = { host: maria.host, port: maria.port, user: maria.user, password: maria.password };
  ps = await startPlanetscaleHttp({ mysql, database: DB, username: USER, password: PASS });
  tight = await startPlanetscaleHttp({
    mysql,
    database: DB,
    username: USER,
    password: PASS,
    idleTimeoutMs: 150,
    maxRows: 10,
  });
  timed = await startPlanetscaleHttp({
    mysql,
    database: DB,
    username: USER,
    password: PASS,
    transactionTimeoutMs: 400,
  });
}, 30_000);

afterAll(async () => {
  await timed?.stop();
  await tight?.stop();
  await ps?.stop();
  await maria?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("value encoding", () => {
  const rawBytes = new Uint8Array([0x00, 0xff, 0x10, 0x80, 0x0a, 0x27]);
  const allBytes = new Uint8Array(256).map((_, i) => i);
  const text = "héllo 😀 世界 \"quoted\" 'single' \\ back";

  beforeAll(async () => {
    const c = conn();
    await c.execute(
      `INSERT INTO kinds VALUES (1, 1, -9007199254740993, 18446744073709551615, 12345678901234.123456,
        '2024-02-29', '2024-02-29 23:59:59.123456', '-838:59:59', 0.25, 'sad', ?, NULL, ?, ?, ?)`,
      [text, rawBytes, allBytes, JSON.stringify({ a: [1, 2], b: "ü😀", n: null })],
    );
  });

  test("integers, big integers, decimals, dates, floats, enums come back as PlanetScale casts them", async () => {
    const r = await conn().execute(
      "SELECT id, flag, big, ubig, price, day, at, dur, ratio, mood FROM kinds WHERE id = 1",
    );
    expect(r.rows[0]).toEqual({
      id: 1,
      flag: 1,
      big: "-9007199254740993", // INT64 → string, exact beyond 2^53
      ubig: "18446744073709551615", // UINT64 max, exact
      price: "12345678901234.123456",
      day: "2024-02-29",
      at: "2024-02-29 23:59:59.123456",
      dur: "-838:59:59",
      ratio: 0.25,
      mood: "sad",
    });
    expect(r.types).toEqual({
      id: "INT32",
      flag: "INT8",
      big: "INT64",
      ubig: "UINT64",
      price: "DECIMAL",
      day: "DATE",
      at: "DATETIME",
      dur: "TIME",
      ratio: "FLOAT64",
      mood: "ENUM",
    });
  });

  test("utf8mb4 text (emoji, quotes, backslash) and NULL round-trip", async () => {
    const r = await conn().execute("SELECT label, note, CHAR_LENGTH(label) AS chars FROM kinds WHERE id = 1");
    expect(r.rows[0]).toEqual({ label: text, note: null, chars: [...text].length });
  });

  test("VARBINARY and BLOB come back as Uint8Array with the exact bytes", async () => {
    const r = await conn().execute("SELECT raw, blobby FROM kinds WHERE id = 1");
    const row = r.rows[0] as { raw: Uint8Array; blobby: Uint8Array };
    expect(row.raw).toBeInstanceOf(Uint8Array);
    expect([...row.raw]).toEqual([...rawBytes]);
    expect([...row.blobby]).toEqual([...allBytes]);
    expect(r.types).toEqual({ raw: "VARBINARY", blobby: "BLOB" });
  });

  test("JSON columns and JSON expressions are parsed into objects", async () => {
    const r = await conn().execute("SELECT doc, JSON_OBJECT('k', 1, 'e', '😀') AS made FROM kinds WHERE id = 1");
    expect(r.rows[0]).toEqual({ doc: { a: [1, 2], b: "ü😀", n: null }, made: { k: 1, e: "😀" } });
    expect(r.types).toEqual({ doc: "JSON", made: "JSON" });
  });

  test("aggregates are INT64 strings, NULL literal is a NULL-typed null, an empty result has fields only", async () => {
    const c = conn();
    const r = await c.execute("SELECT COUNT(*) AS n, NULL AS nothing FROM kinds");
    expect(r.rows[0]).toEqual({ n: "1", nothing: null });
    expect(r.types.nothing).toBe("NULL");
    const empty = await c.execute("SELECT id FROM kinds WHERE id = -1");
    expect(empty.rows).toEqual([]);
    expect(empty.headers).toEqual(["id"]);
  });

  test("a large result keeps every row's bytes intact", async () => {
    const r = await conn().execute(
      "SELECT seq, REPEAT(CHAR(65 + seq % 26 USING utf8mb4), seq % 40) AS s FROM seq_1_to_3000 ORDER BY seq",
    );
    expect(r.rows.length).toBe(3000);
    for (const [i, row] of (r.rows as Array<{ seq: string; s: string }>).entries()) {
      const seq = i + 1;
      expect(row.seq).toBe(String(seq)); // seq is BIGINT UNSIGNED → string
      expect(row.s).toBe(String.fromCharCode(65 + (seq % 26)).repeat(seq % 40));
    }
  });
});

describe("write results", () => {
  test("INSERT reports insertId (string) and rowsAffected", async () => {
    const c = conn();
    const one = await c.execute("INSERT INTO items (name, qty) VALUES (?, ?)", ["w-one", 1]);
    expect(one.rowsAffected).toBe(1);
    expect(Number(one.insertId)).toBeGreaterThan(0);
    const three = await c.execute("INSERT INTO items (name, qty) VALUES ('w-a', 1), ('w-b', 1), ('w-c', 2)");
    expect(three.rowsAffected).toBe(3);
    expect(BigInt(three.insertId)).toBe(BigInt(one.insertId) + 1n); // first id of the batch
  });

  test("UPDATE counts matched rows (clientFoundRows), not only changed ones", async () => {
    const c = conn();
    // w-a and w-b have qty 1, w-c has qty 2: setting qty = 2 matches 3 rows but changes 2.
    const r = await c.execute("UPDATE items SET qty = 2 WHERE name IN ('w-a', 'w-b', 'w-c')");
    expect(r.rowsAffected).toBe(3);
    const none = await c.execute("UPDATE items SET qty = 2 WHERE name = 'no-such'");
    expect(none.rowsAffected).toBe(0);
    expect(none.insertId).toBe("0");
  });

  test("Client.execute (a new session per call) works", async () => {
    const client = new Client({ url: ps.url, fetch });
    const r = await client.execute("SELECT qty FROM items WHERE name = ?", ["w-one"]);
    expect(r.rows).toEqual([{ qty: 1 }]);
  });
});

describe("transactions and sessions", () => {
  test("a committed transaction is visible afterwards and releases its connection", async () => {
    const c = conn();
    const res = await c.transaction(async (tx) => {
      await tx.execute("INSERT INTO items (name) VALUES ('tx-commit-1')");
      await tx.execute("INSERT INTO items (name) VALUES ('tx-commit-2')");
      const inside = await tx.execute("SELECT COUNT(*) AS n FROM items WHERE name LIKE 'tx-commit-%'");
      return inside.rows[0];
    });
    expect(res).toEqual({ n: "2" });
    const after = await conn().execute("SELECT COUNT(*) AS n FROM items WHERE name LIKE 'tx-commit-%'");
    expect(after.rows[0]).toEqual({ n: "2" });
    expect(ps.stats().sessions).toBe(0);
  });

  test("throwing inside a transaction rolls everything back", async () => {
    const boom = new Error("boom");
    const c = conn();
    await expect(
      c.transaction(async (tx) => {
        await tx.execute("INSERT INTO items (name) VALUES ('tx-rollback')");
        throw boom;
      }),
    ).rejects.toBe(boom);
    const after = await conn().execute("SELECT COUNT(*) AS n FROM items WHERE name = 'tx-rollback'");
    expect(after.rows[0]).toEqual({ n: "0" });
    expect(ps.stats().sessions).toBe(0);
  });

  test("concurrent statements in one transaction are queued on its connection, not rejected", async () => {
    const c = conn();
    const observer = conn();
    const names = Array.from({ length: 12 }, (_, i) => `tx-par-${i}`);
    await c.transaction(async (tx) => {
      const results = await Promise.all([
        ...names.map((n) => tx.execute("INSERT INTO items (name) VALUES (?)", [n])),
        tx.execute("SELECT SLEEP(0.05) AS slept"),
      ]);
      for (const r of results.slice(0, names.length)) expect(r.rowsAffected).toBe(1);
      // Same connection: the transaction sees its own uncommitted rows, others do not.
      const mine = await tx.execute("SELECT COUNT(*) AS n FROM items WHERE name LIKE 'tx-par-%'");
      expect(mine.rows[0]).toEqual({ n: String(names.length) });
      const theirs = await observer.execute("SELECT COUNT(*) AS n FROM items WHERE name LIKE 'tx-par-%'");
      expect(theirs.rows[0]).toEqual({ n: "0" });
      expect(ps.stats().sessions).toBeGreaterThanOrEqual(1);
    });
    const after = await observer.execute("SELECT COUNT(*) AS n FROM items WHERE name LIKE 'tx-par-%'");
    expect(after.rows[0]).toEqual({ n: String(names.length) });
  });

  test("BEGIN/COMMIT sent by hand on one Connection share the session", async () => {
    const c = conn();
    await c.execute("BEGIN");
    await c.execute("INSERT INTO items (name) VALUES ('manual-tx')");
    const other = await conn().execute("SELECT COUNT(*) AS n FROM items WHERE name = 'manual-tx'");
    expect(other.rows[0]).toEqual({ n: "0" });
    await c.execute("COMMIT");
    const after = await conn().execute("SELECT COUNT(*) AS n FROM items WHERE name = 'manual-tx'");
    expect(after.rows[0]).toEqual({ n: "1" });
  });

  test("session state set with SET stays with the Connection that set it", async () => {
    const c = conn();
    await c.execute("SET @standin_probe = 42");
    const r = await c.execute("SELECT @standin_probe AS v");
    expect(r.rows[0]).toEqual({ v: "42" }); // a user variable holding an integer is INT64
    // A different Connection (pooled) does not see it.
    const other = await conn().execute("SELECT @standin_probe AS v");
    expect(other.rows[0]).toEqual({ v: null });
  });

  test("PlanetScale-only statements are accepted and ignored", async () => {
    const c = conn();
    await c.execute("SET @@boost_cached_queries = true");
    await c.execute("USE @replica");
    const r = await c.execute("SELECT 1 + 1 AS two");
    expect(Number((r.rows[0] as { two: unknown }).two)).toBe(2);
  });

  test("an idle transaction is rolled back and its session then fails loudly", async () => {
    const c = conn(tight.url);
    await c.execute("BEGIN");
    await c.execute("INSERT INTO items (name) VALUES ('idle-tx')");
    expect(tight.stats().sessions).toBe(1);
    await Bun.sleep(450);
    expect(tight.stats().sessions).toBe(0);
    const err = await dbError(c.execute("INSERT INTO items (name) VALUES ('idle-tx-2')"));
    expect(err.message).toContain("rolled back");
    expect((err.body as { code: string }).code).toBe("ABORTED");
    // The Connection received a fresh session with the error and works again.
    const r = await c.execute("SELECT COUNT(*) AS n FROM items WHERE name LIKE 'idle-tx%'");
    expect(r.rows[0]).toEqual({ n: "0" });
  });

  test("a client that aborts a statement waiting on a row lock gets it killed and its session rolled back and released", async () => {
    await conn().execute("INSERT INTO items (name, qty) VALUES ('abort-locked', 0), ('abort-mine', 0)");
    const holder = await mysqlDirect();
    try {
      await holder.query("BEGIN");
      await holder.query("SELECT qty FROM items WHERE name = 'abort-locked' FOR UPDATE");
      // Other tests' sticky sessions may still be bound: count from here.
      const before = ps.stats();
      const gone = new AbortController();
      const c = connect({ url: ps.url, fetch: (input, init) => fetch(input, { ...init, signal: gone.signal }) });
      await c.execute("BEGIN");
      await c.execute("UPDATE items SET qty = 1 WHERE name = 'abort-mine'");
      const LOCKED = "UPDATE items SET qty = 1 WHERE name = 'abort-locked'";
      const waiting = c.execute(LOCKED);
      waiting.catch(() => {});
      await eventually("the statement waits on the row lock", async () => (await runningNow(holder, LOCKED)) === 1);
      gone.abort();
      await expect(waiting).rejects.toThrow();
      // Released at once: the statement stopped waiting (no lock wait left) and the session is gone,
      // long before MariaDB's lock wait timeout (50 s) or the stand-in's idle timeout (30 s).
      await eventually(
        "the session is ended",
        async () => ps.stats().sessions === before.sessions && (await runningNow(holder, LOCKED)) === 0,
      );
      expect(ps.stats().killed).toBeGreaterThan(before.killed);
      await holder.query("COMMIT");
      const after = await conn().execute("SELECT name, qty FROM items WHERE name LIKE 'abort-%' ORDER BY name");
      expect(after.rows).toEqual([
        { name: "abort-locked", qty: 0 },
        { name: "abort-mine", qty: 0 },
      ]);
    } finally {
      await holder.end();
    }
  });

  test("a transaction open longer than the transaction timeout is rolled back, even while its statement runs", async () => {
    await conn().execute("INSERT INTO items (name, qty) VALUES ('txto-locked', 0)");
    const holder = await mysqlDirect();
    try {
      await holder.query("BEGIN");
      await holder.query("SELECT qty FROM items WHERE name = 'txto-locked' FOR UPDATE");
      const c = conn(timed.url);
      await c.execute("BEGIN");
      await c.execute("INSERT INTO items (name) VALUES ('txto-mine')");
      // Blocks on the holder's lock until the transaction timeout ends the whole session.
      const LOCKED = "UPDATE items SET qty = 1 WHERE name = 'txto-locked'";
      const err = await dbError(c.execute(LOCKED));
      expect(err.message).toContain("transaction timeout");
      expect(timed.stats().sessions).toBe(0);
      await eventually("the statement was stopped", async () => (await runningNow(holder, LOCKED)) === 0);
      await holder.query("COMMIT");
      const after = await conn().execute("SELECT COUNT(*) AS n FROM items WHERE name = 'txto-mine'");
      expect(after.rows[0]).toEqual({ n: "0" });
    } finally {
      await holder.end();
    }
  });

  test("results above maxRows are an error", async () => {
    const err = await dbError(conn(tight.url).execute("SELECT seq FROM seq_1_to_11"));
    expect(err.message).toContain("Row count exceeded 10");
    const ok = await conn(tight.url).execute("SELECT seq FROM seq_1_to_10");
    expect(ok.rows.length).toBe(10);
  });
});

describe("errors", () => {
  test("a duplicate key is a DatabaseError carrying the MySQL errno and sqlstate", async () => {
    const c = conn();
    await c.execute("INSERT INTO items (name) VALUES ('dup')");
    const err = await dbError(c.execute("INSERT INTO items (name) VALUES ('dup')"));
    expect(err.message).toContain("Duplicate entry");
    expect(err.message).toContain("(errno 1062) (sqlstate 23000)");
    expect(err.status).toBe(400); // the driver's status for SQL errors in a 200 body
    expect((err.body as { code: string }).code).toBe("ALREADY_EXISTS");
    // The Connection stays usable after the error.
    const r = await c.execute("SELECT COUNT(*) AS n FROM items WHERE name = 'dup'");
    expect(r.rows[0]).toEqual({ n: "1" });
  });

  test("a syntax error is a DatabaseError with errno 1064", async () => {
    const err = await dbError(conn().execute("SELEC 1"));
    expect(err.message).toContain("(errno 1064)");
    expect((err.body as { code: string }).code).toBe("INVALID_ARGUMENT");
  });

  test("an error inside a transaction keeps the transaction usable", async () => {
    const c = conn();
    await c.transaction(async (tx) => {
      await tx.execute("INSERT INTO items (name) VALUES ('tx-err-ok')");
      await dbError(tx.execute("INSERT INTO items (name) VALUES ('tx-err-ok')"));
    });
    const r = await c.execute("SELECT COUNT(*) AS n FROM items WHERE name = 'tx-err-ok'");
    expect(r.rows[0]).toEqual({ n: "1" });
  });

  test("a wrong password is a DatabaseError with status 401", async () => {
    const url = new URL(ps.url);
    url.password = "wrong";
    const err = await dbError(conn(url.toString()).execute("SELECT 1"));
    expect(err.status).toBe(401);
    expect(err.name).toBe("DatabaseError");
    const missing = await post("/psdb.v1alpha1.Database/Execute", JSON.stringify({ query: "SELECT 1" }), false);
    expect(missing.status).toBe(401);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe("unauthenticated");
  });

  test("malformed request bodies are 400 with an error object", async () => {
    for (const body of ["{not json", "[]", "null", JSON.stringify({ session: null }), JSON.stringify({ query: 5 })]) {
      const res = await post("/psdb.v1alpha1.Database/Execute", body);
      expect(res.status).toBe(400);
      const parsed = (await res.json()) as { error: { code: string; message: string } };
      expect(parsed.error.code).toBe("invalid_argument");
      expect(typeof parsed.error.message).toBe("string");
    }
    // A garbage session is treated as no session, not as a crash.
    const res = await post(
      "/psdb.v1alpha1.Database/Execute",
      JSON.stringify({ query: "SELECT 2 AS x", session: [1, { a: 2 }] }),
    );
    expect(res.status).toBe(200);
    const ok = (await res.json()) as { session: unknown; result: { rows: unknown[] } };
    expect(ok.session).toBeTruthy();
    expect(ok.result.rows.length).toBe(1);
  });

  test("CreateSession returns a truthy session (used by conn.refresh)", async () => {
    const c = conn();
    await c.refresh();
    const r = await c.execute("SELECT 3 AS x");
    expect(Number((r.rows[0] as { x: unknown }).x)).toBe(3);
  });
});

import { describe, expect, test } from "bun:test";
import { Client } from "@planetscale/database";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { migrate } from "../../src/db/migrate.ts";
import { keys } from "../../src/redis/keys.ts";
import { readMigrations, runMigrations } from "../../scripts/migrate.ts";
import { CITY_CENTRE, seed, SHOP_TYPES } from "../../scripts/seed.ts";
import { createDatabase } from "../../scripts/stack/index.ts";
import { startPlanetscaleHttp } from "../../scripts/stack/planetscale-http.ts";
import { call } from "../support/http.ts";
import { createTestApp, getStack } from "../support/stack.ts";

describe("migrations", () => {
  test("apply in order once, are recorded in the ledger, and a second run applies nothing", async () => {
    const stack = await getStack();
    const database = `cityhub_mig_${Math.floor(Math.random() * 1e9)}`;
    await createDatabase(stack.mysql, database);
    const ps = await startPlanetscaleHttp({ mysql: { host: stack.mysql.host, port: stack.mysql.port, user: stack.mysql.user, password: stack.mysql.password }, database, username: "u", password: "p" });
    try {
      const first = await runMigrations(ps.url);
      expect(first.applied).toEqual(readMigrations().map((m) => m.name));
      expect(first.skipped).toEqual([]);
      const again = await runMigrations(ps.url);
      expect(again.applied).toEqual([]);
      expect(again.skipped.length).toBe(first.applied.length);
      const db = new Client({ url: ps.url });
      const tables = (await db.execute("SHOW TABLES")).rows.map((r) => Object.values(r as Record<string, string>)[0]);
      for (const t of ["tb_user", "tb_shop", "tb_voucher_order", "tb_follow", "tb_payment", "tb_refund", "schema_migrations"]) expect(tables).toContain(t);
      // An applied migration that was edited afterwards is refused.
      const edited = readMigrations().map((m, i) => (i === 0 ? { ...m, sql: `${m.sql}\n-- edited` } : m));
      await expect(migrate(db, edited)).rejects.toThrow("changed after it was applied");
    } finally {
      await ps.stop();
    }
  });
});

describe("seed", () => {
  test("demo data: every type has shops near the classic centre, vouchers, users with working tokens, notes with real likes", async () => {
    const t = await createTestApp();
    const tokensFile = join(mkdtempSync(join(tmpdir(), "seed-")), "tokens.txt");
    const res = await seed(t.deps.db as Client, t.deps.redis, { shops: 60, users: 25, notes: 6, tokensFile, tokenTtlSeconds: 600, sessionSecret: t.deps.config.SESSION_SECRET, randomSeed: 7, quiet: true });
    expect(res).toMatchObject({ shopTypes: SHOP_TYPES.length, shops: 60, users: 25, notes: 6, tokens: 25 });
    expect(res.geoIndexed).toBeGreaterThanOrEqual(60);
    for (let typeId = 1; typeId <= SHOP_TYPES.length; typeId++) {
      const near = await call<{ distance: number }[]>(t.app, "GET", `/api/shop/of/type?typeId=${typeId}&x=${CITY_CENTRE.x}&y=${CITY_CENTRE.y}`);
      expect(near.body.data?.length, `type ${typeId}`).toBeGreaterThan(0);
    }
    const tokens = readFileSync(tokensFile, "utf8").trim().split("\n");
    expect(tokens.length).toBe(25);
    expect(new Set(tokens).size).toBe(25);
    for (const token of tokens.slice(0, 3)) expect((await call(t.app, "GET", "/api/user/me", { token })).body.success).toBe(true);
    const notes = (await t.deps.db.execute("SELECT id, liked FROM tb_blog ORDER BY id DESC LIMIT 6")).rows as { id: string; liked: number }[];
    for (const n of notes) expect(await t.deps.redis.zcard(keys.blogLiked(Number(n.id)))).toBe(Number(n.liked));
    // The demo seckill vouchers are on sale: a seeded user can buy one.
    const seckill = (await t.deps.db.execute("SELECT voucher_id FROM tb_seckill_config ORDER BY voucher_id DESC LIMIT 1")).rows[0] as { voucher_id: string };
    const bought = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${seckill.voucher_id}`, { token: tokens[0] });
    expect(bought.body.success).toBe(true);
  });
});

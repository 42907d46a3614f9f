import { describe, expect, test } from "bun:test";
import { toSqlUtc } from "../../src/util/time.ts";
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
    const ps = await startPlanetscaleHttp({
      mysql: { host: stack.mysql.host, port: stack.mysql.port, user: stack.mysql.user, password: stack.mysql.password },
      database,
      username: "u",
      password: "p",
    });
    try {
      const first = await runMigrations(ps.url);
      expect(first.applied).toEqual(readMigrations().map((m) => m.name));
      expect(first.skipped).toEqual([]);
      const again = await runMigrations(ps.url);
      expect(again.applied).toEqual([]);
      expect(again.skipped.length).toBe(first.applied.length);
      const db = new Client({ url: ps.url });
      const tables = (await db.execute("SHOW TABLES")).rows.map((r) => Object.values(r as Record<string, string>)[0]);
      for (const t of [
        "tb_user",
        "tb_shop",
        "tb_voucher_order",
        "tb_follow",
        "tb_payment",
        "tb_refund",
        "schema_migrations",
      ])
        expect(tables).toContain(t);
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
    const res = await seed(t.deps.db as Client, t.deps.redis, {
      shops: 60,
      users: 25,
      notes: 6,
      tokensFile,
      tokenTtlSeconds: 600,
      sessionSecret: t.deps.config.SESSION_SECRET,
      randomSeed: 7,
      quiet: true,
    });
    expect(res).toMatchObject({ shopTypes: SHOP_TYPES.length, shops: 60, users: 25, notes: 6, tokens: 25 });
    expect(res.geoIndexed).toBeGreaterThanOrEqual(60);
    for (let typeId = 1; typeId <= SHOP_TYPES.length; typeId++) {
      const near = await call<{ distance: number }[]>(
        t.app,
        "GET",
        `/api/shop/of/type?typeId=${typeId}&x=${CITY_CENTRE.x}&y=${CITY_CENTRE.y}`,
      );
      expect(near.body.data?.length, `type ${typeId}`).toBeGreaterThan(0);
    }
    const tokens = readFileSync(tokensFile, "utf8").trim().split("\n");
    expect(tokens.length).toBe(25);
    expect(new Set(tokens).size).toBe(25);
    for (const token of tokens.slice(0, 3))
      expect((await call(t.app, "GET", "/api/user/me", { token })).body.success).toBe(true);
    const notes = (await t.deps.db.execute("SELECT id, liked FROM tb_blog ORDER BY id DESC LIMIT 6")).rows as {
      id: string;
      liked: number;
    }[];
    for (const n of notes) expect(await t.deps.redis.zcard(keys.blogLiked(Number(n.id)))).toBe(Number(n.liked));
    // The demo seckill vouchers are on sale: a seeded user can buy one.
    const seckill = (
      await t.deps.db.execute("SELECT voucher_id FROM tb_seckill_config ORDER BY voucher_id DESC LIMIT 1")
    ).rows[0] as { voucher_id: string };
    const bought = await call<string>(t.app, "POST", `/api/voucher-order/seckill/${seckill.voucher_id}`, {
      token: tokens[0],
    });
    expect(bought.body.success).toBe(true);
  });

  test("every image URL the seed writes is served by the app, and each type's first shop has a seckill voucher on sale", async () => {
    const t = await createTestApp({ UPLOAD_DIR: mkdtempSync(join(tmpdir(), "seed-uploads-")) });
    const before = Number(
      ((await t.deps.db.execute("SELECT COALESCE(MAX(id), 0) AS n FROM tb_shop")).rows[0] as { n: string }).n,
    );
    const blogsBefore = Number(
      ((await t.deps.db.execute("SELECT COALESCE(MAX(id), 0) AS n FROM tb_blog")).rows[0] as { n: string }).n,
    );
    const res = await seed(t.deps.db as Client, t.deps.redis, {
      shops: 40,
      users: 15,
      notes: 6,
      tokenTtlSeconds: 600,
      randomSeed: 11,
      quiet: true,
      blobs: t.deps.blobs,
    });
    expect(res.images).toBeGreaterThan(0);

    const shops = (await t.deps.db.execute("SELECT name, images, avg_price FROM tb_shop WHERE id > ?", [before]))
      .rows as { name: string; images: string; avg_price: number }[];
    const users = (
      await t.deps.db.execute("SELECT icon FROM tb_user WHERE phone BETWEEN '13800000000' AND '13800000014'")
    ).rows as { icon: string }[];
    const notes = (await t.deps.db.execute("SELECT images FROM tb_blog WHERE id > ?", [blogsBefore])).rows as {
      images: string;
    }[];
    expect(shops.length).toBe(40);
    expect(users.length).toBe(15);
    expect(notes.length).toBe(6);
    for (const s of shops) {
      expect(s.name).toMatch(/^\S+\(.+店\)$/);
      expect(Number(s.avg_price)).toBeGreaterThanOrEqual(40);
    }
    const urls = new Set([
      ...shops.flatMap((s) => s.images.split(",")),
      ...users.map((u) => u.icon),
      ...notes.flatMap((n) => n.images.split(",")),
    ]);
    expect(urls.size).toBeGreaterThanOrEqual(SHOP_TYPES.length);
    for (const url of urls) {
      const img = await t.app.request(url, {}, { clientIp: "10.0.0.1" });
      expect(img.status, url).toBe(200);
      expect(img.headers.get("content-type"), url).toBe("image/png");
      expect([...new Uint8Array(await img.arrayBuffer()).slice(0, 4)], url).toEqual([0x89, 0x50, 0x4e, 0x47]);
    }

    const now = Date.now();
    for (let typeId = 1; typeId <= SHOP_TYPES.length; typeId++) {
      const first = (await t.deps.db.execute("SELECT MIN(id) AS id FROM tb_shop WHERE type_id = ?", [typeId]))
        .rows[0] as { id: string };
      // Read from MySQL: the voucher list's cache (L2 in the shared Redis) may hold what another
      // test file read for the same shop before this seed ran; the seed writes MySQL only.
      const open = (
        await t.deps.db.execute(
          `SELECT v.id FROM tb_voucher v JOIN tb_seckill_voucher s ON s.voucher_id = v.id
          WHERE v.shop_id = ? AND v.type = 1 AND s.stock > 0 AND v.pay_value < v.actual_value AND s.begin_time <= ? AND s.end_time > ?`,
          [first.id, toSqlUtc(now), toSqlUtc(now)],
        )
      ).rows;
      expect(open.length, `type ${typeId}, shop ${first.id}`).toBeGreaterThan(0);
    }
  });
});

/**
 * `npm run seed -- [--shops 500] [--users 50] [--notes 20] [--tokens FILE] [--token-ttl 86400]`
 *
 * Demo data against the running stack (settings from .local/stack.env, or the environment), written
 * through the production clients: shop types, shops scattered around the classic front-end's fixed
 * point in Hangzhou (120.149993, 30.334229) so "nearby" has results for every type, with names,
 * prices and opening hours that fit their type, vouchers (a normal one and a seckill on sale on the
 * first shop of each type), demo users with profiles, a few notes, and the GEO index. Pictures of
 * shops, avatars and notes are placeholders rendered into the app's blob store
 * (scripts/demo/images.ts), so every image URL written here is served by the app at /imgs. With
 * --tokens, opens a session per seeded user and writes the tokens one per line (the file JMeter
 * plans read).
 */
import { Client } from "@planetscale/database";
import { Redis } from "@upstash/redis";
import { SingleBar, Presets } from "cli-progress";
import { writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { type BlobStore, createBlobStore } from "../src/blob/index.ts";
import { LocalFolderBlobStore } from "../src/blob/local.ts";
import { EnvSchema, parseEnv } from "../src/env.ts";
import { createSession, SessionKeys } from "../src/services/session.ts";
import { rebuildShopGeo } from "../src/services/shop-geo.ts";
import { keys } from "../src/redis/keys.ts";
import { createSeckillVoucher } from "../src/services/seckill/config.ts";
import { demoImages, storeDemoImages } from "./demo/images.ts";
import { loadStackEnv, ROOT } from "./stack/env-file.ts";

export const CITY_CENTRE = { x: 120.149993, y: 30.334229 } as const;

/** Shop types (ids 1..10, in this order). Icons are the classic front-end's own assets (`/imgs/types/…` there), kept as it expects them. */
export const SHOP_TYPES = [
  ["美食", "/types/ms.png"],
  ["KTV", "/types/KTV.png"],
  ["丽人·美发", "/types/lrmf.png"],
  ["健身运动", "/types/jsyd.png"],
  ["按摩·足疗", "/types/amzl.png"],
  ["美容SPA", "/types/spa.png"],
  ["亲子游乐", "/types/qzyl.png"],
  ["酒吧", "/types/jiuba.png"],
  ["轰趴馆", "/types/hpg.png"],
  ["美睫·美甲", "/types/mjmj.png"],
] as const;

const AREAS = [
  "大关",
  "拱宸桥",
  "北部新城",
  "运河上街",
  "远洋乐堤港",
  "武林广场",
  "湖滨",
  "西溪",
  "文二路",
  "小河直街",
];
const BRANDS = [
  "老街",
  "半山",
  "拾味",
  "青柠",
  "花间",
  "禾木",
  "森屿",
  "一品",
  "星光",
  "南北",
  "小城",
  "悦享",
  "知味",
  "运河",
  "橙子",
  "白塔",
];

/**
 * What a shop of each type (index = type id − 1) is called, costs per person (yuan, [min, max)),
 * when it is open, and the face value of its vouchers (yuan): names read like a listing
 * ("半山火锅(大关店)"), not "shop 17".
 */
const TYPE_PROFILES: readonly {
  words: readonly string[];
  price: readonly [number, number];
  hours: string;
  voucher: number;
}[] = [
  {
    words: ["火锅", "面馆", "茶餐厅", "烤肉", "小馆", "酒家", "私房菜", "小厨"],
    price: [40, 160],
    hours: "10:00-22:00",
    voucher: 100,
  },
  { words: ["量贩KTV", "音乐会所", "欢唱KTV", "声宴KTV"], price: [80, 200], hours: "12:00-02:00", voucher: 200 },
  { words: ["造型", "美发沙龙", "发艺", "形象设计"], price: [60, 300], hours: "10:00-21:30", voucher: 100 },
  { words: ["健身", "瑜伽馆", "搏击馆", "游泳健身", "攀岩馆"], price: [50, 150], hours: "06:30-22:30", voucher: 100 },
  { words: ["足道", "推拿馆", "养生馆", "足浴"], price: [100, 260], hours: "11:00-01:00", voucher: 150 },
  { words: ["美容SPA", "皮肤管理", "SPA会所"], price: [200, 600], hours: "10:00-22:00", voucher: 300 },
  { words: ["亲子乐园", "儿童乐园", "萌宠乐园", "亲子手工坊"], price: [60, 180], hours: "09:30-20:30", voucher: 100 },
  { words: ["精酿酒吧", "清吧", "威士忌吧", "LiveHouse"], price: [80, 220], hours: "19:00-02:00", voucher: 150 },
  { words: ["轰趴馆", "桌游轰趴", "别墅轰趴"], price: [100, 300], hours: "全天", voucher: 300 },
  { words: ["美甲", "美睫工作室", "美甲美睫"], price: [80, 260], hours: "10:00-21:00", voucher: 100 },
];

export interface SeedOptions {
  shops: number;
  users: number;
  notes: number;
  tokensFile?: string;
  tokenTtlSeconds: number;
  /** The app's SESSION_SECRET (tokens are signed with it); required with `tokensFile`. */
  sessionSecret?: string;
  /** Deterministic data for a given seed value. */
  randomSeed: number;
  quiet?: boolean;
  /**
   * The app's blob store (what /imgs serves): the demo pictures are rendered into it. Without it
   * the rows still name the pictures but nothing is stored (benchmarks, which never fetch them).
   */
  blobs?: BlobStore;
}

export interface SeedResult {
  shopTypes: number;
  shops: number;
  vouchers: number;
  users: number;
  notes: number;
  geoIndexed: number;
  tokens: number;
  /** Demo pictures written to the blob store (0 without `blobs`). */
  images: number;
}

/**
 * The blob store the app reads under `env`, for the seed to write to: the configured S3 store with
 * BLOB_STORE=s3 (then the whole app env must parse), else the local folder UPLOAD_DIR resolved
 * against `cwd` — the app's working directory (`npm run dev` runs it in the repository root).
 */
export function seedBlobStore(env: Record<string, string | undefined>, cwd = ROOT): BlobStore {
  if (env.BLOB_STORE === "s3") return createBlobStore(parseEnv(env));
  return new LocalFolderBlobStore(resolve(cwd, env.UPLOAD_DIR || EnvSchema.shape.UPLOAD_DIR.parse(undefined)));
}

/** mulberry32: small, fast, seedable PRNG (Math.random cannot be seeded). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A point at `distanceM` metres and `bearing` radians from the centre (equirectangular, fine at city scale). */
function offset(distanceM: number, bearing: number): { x: number; y: number } {
  const dy = (distanceM * Math.cos(bearing)) / 111_320;
  const dx = (distanceM * Math.sin(bearing)) / (111_320 * Math.cos((CITY_CENTRE.y * Math.PI) / 180));
  return { x: +(CITY_CENTRE.x + dx).toFixed(6), y: +(CITY_CENTRE.y + dy).toFixed(6) };
}

function bar(label: string, total: number, quiet?: boolean) {
  if (quiet || total === 0) return { increment: (_n?: number) => {}, stop: () => {} };
  const b = new SingleBar(
    {
      format: `${label.padEnd(10)} [{bar}] {percentage}% | {value}/{total} | {duration}s`,
      stream: process.stderr,
      hideCursor: false,
    },
    Presets.shades_classic,
  );
  b.start(total, 0);
  return { increment: (n = 1) => b.increment(n), stop: () => b.stop() };
}

export async function seed(db: Client, redis: Redis, opts: SeedOptions): Promise<SeedResult> {
  const rand = prng(opts.randomSeed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;
  const batchSize = 1000;
  const images = demoImages(SHOP_TYPES.length);
  const stored = opts.blobs ? await storeDemoImages(opts.blobs, images) : 0;

  // Shop types: fixed ids 1..10 so the classic front-end's type links work; re-runs are no-ops.
  await db.execute(
    `INSERT IGNORE INTO tb_shop_type (id, name, icon, sort) VALUES ${SHOP_TYPES.map(() => "(?, ?, ?, ?)").join(", ")}`,
    SHOP_TYPES.flatMap(([name, icon], i) => [i + 1, name, icon, i + 1]),
  );

  // Shops: 80 % within 5 km of the centre (what nearby search returns), the rest up to 15 km.
  // Every type gets at least its share: type = i mod 10 before shuffling the rest at random.
  const shopsBar = bar("shops", opts.shops, opts.quiet);
  for (let start = 0; start < opts.shops; start += batchSize) {
    const n = Math.min(batchSize, opts.shops - start);
    const values: unknown[] = [];
    for (let i = 0; i < n; i++) {
      const k = start + i;
      const typeId =
        k < SHOP_TYPES.length * 3 ? (k % SHOP_TYPES.length) + 1 : 1 + Math.floor(rand() * SHOP_TYPES.length);
      const far = rand() < 0.2;
      const p = offset(far ? 5000 + rand() * 10_000 : Math.sqrt(rand()) * 4900, rand() * 2 * Math.PI);
      const area = pick(AREAS);
      const profile = TYPE_PROFILES[typeId - 1] ?? TYPE_PROFILES[0];
      if (!profile) throw new Error("seed: no shop type profiles");
      // All pictures of the type, starting at a different one per shop (the list shows the first).
      const pictures = images.shops[typeId - 1] ?? [];
      const shopImages = pictures.map((_, j) => pictures[(k + j) % pictures.length]?.url).join(",");
      const [lo, hi] = profile.price;
      values.push(
        `${pick(BRANDS)}${pick(profile.words)}(${area}店)`,
        typeId,
        shopImages,
        area,
        `${area}路${1 + Math.floor(rand() * 999)}号`,
        p.x,
        p.y,
        lo + Math.floor(rand() * (hi - lo)),
        Math.floor(rand() * 5000),
        Math.floor(rand() * 3000),
        35 + Math.floor(rand() * 16),
        profile.hours,
      );
    }
    await db.execute(
      `INSERT INTO tb_shop (name, type_id, images, area, address, x, y, avg_price, sold, comments, score, open_hours) VALUES ${Array.from({ length: n }, () => "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)").join(", ")}`,
      values,
    );
    shopsBar.increment(n);
  }
  shopsBar.stop();

  // Vouchers for the first shop of each type: a normal one at 5 % off, and a seckill one at about
  // 40 % of its value, on sale from an hour ago for 30 days (dev data persists across runs; a
  // week-long sale left a week-old checkout with nothing to buy). Amounts are in cents.
  const firstShops = (await db.execute("SELECT MIN(id) AS id, type_id FROM tb_shop GROUP BY type_id ORDER BY type_id"))
    .rows as { id: string | number; type_id: number }[];
  let vouchers = 0;
  const now = Date.now();
  for (const s of firstShops) {
    const shopId = Number(s.id);
    const value = TYPE_PROFILES[Number(s.type_id) - 1]?.voucher ?? 100;
    await db.execute(
      "INSERT INTO tb_voucher (shop_id, title, sub_title, rules, pay_value, actual_value, type, status) VALUES (?, ?, ?, ?, ?, ?, 0, 1)",
      [shopId, `${value}元代金券`, "周一至周日均可使用", "全场通用\\n无需预约\\n可叠加使用", value * 95, value * 100],
    );
    // Through the service, so the voucher is purchasable: config row, Redis stock and window.
    // Seeded sales live in the main database (unsharded); sharded ones are created through the API.
    await createSeckillVoucher(
      { db, redis, seckillShards: [] },
      {
        shopId,
        title: `${value}元代金券 限时秒杀`,
        subTitle: "周一至周日均可使用",
        rules: "每人限购一张\\n不可与其他优惠同享\\n购买后30天内有效",
        payValue: Math.round(value * 0.4) * 100 - 10,
        actualValue: value * 100,
        stock: 100,
        beginMs: now - 3600_000,
        endMs: now + 30 * 86400_000,
        buckets: 1,
        dailyLimit: 0,
      },
    );
    vouchers += 2;
  }

  // Users: phones 138xxxxxxxx from a fixed base, so re-runs find the same users (INSERT IGNORE).
  const usersBar = bar("users", opts.users, opts.quiet);
  const phones: string[] = [];
  for (let start = 0; start < opts.users; start += batchSize) {
    const n = Math.min(batchSize, opts.users - start);
    const values: unknown[] = [];
    for (let i = 0; i < n; i++) {
      const phone = String(13800000000 + start + i);
      phones.push(phone);
      values.push(
        phone,
        `user_${(start + i).toString(36).padStart(6, "0")}`,
        images.avatars[(start + i) % images.avatars.length]?.url ?? "",
      );
    }
    await db.execute(
      `INSERT IGNORE INTO tb_user (phone, nick_name, icon) VALUES ${Array.from({ length: n }, () => "(?, ?, ?)").join(", ")}`,
      values,
    );
    await db.execute(
      `INSERT IGNORE INTO tb_user_info (user_id, city, introduce, gender, credits, level)
       SELECT id, '杭州', '爱吃爱玩', MOD(id, 2), 100, 1 FROM tb_user WHERE phone IN (${phones
         .slice(start)
         .map(() => "?")
         .join(", ")})`,
      phones.slice(start),
    );
    usersBar.increment(n);
  }
  usersBar.stop();

  const users: { id: number; nickName: string; icon: string }[] = [];
  for (let start = 0; start < phones.length; start += batchSize) {
    const chunk = phones.slice(start, start + batchSize);
    const rows = (
      await db.execute(
        `SELECT id, nick_name, icon FROM tb_user WHERE phone IN (${chunk.map(() => "?").join(", ")}) ORDER BY id`,
        chunk,
      )
    ).rows as {
      id: string | number;
      nick_name: string;
      icon: string;
    }[];
    for (const r of rows) users.push({ id: Number(r.id), nickName: r.nick_name, icon: r.icon });
  }

  // Notes by the first users about the first shops, with real likes: the `liked` column must match
  // the likers' ZSET (blog:liked:{id}), or the first toggle would "correct" a made-up count.
  let notes = 0;
  if (users.length > 0 && firstShops.length > 0) {
    for (let i = 0; i < opts.notes; i++) {
      const u = users[i % users.length];
      const s = firstShops[i % firstShops.length];
      if (!u || !s) continue;
      const likers = users.filter(() => rand() < 0.3).slice(0, 40);
      const res = await db.execute(
        "INSERT INTO tb_blog (shop_id, user_id, title, images, content, liked) VALUES (?, ?, ?, ?, ?, ?)",
        [
          Number(s.id),
          u.id,
          `探店笔记 #${i + 1}`,
          images.notes[i % images.notes.length]?.url ?? "",
          "环境不错，服务热情，值得再来。",
          likers.length,
        ],
      );
      const [first, ...rest] = likers.map((l, k) => ({
        score: Date.now() - (likers.length - k) * 60_000,
        member: String(l.id),
      }));
      if (first) await redis.zadd(keys.blogLiked(Number(res.insertId)), first, ...rest);
      notes++;
    }
  }

  // Rows inserted behind the app's back: the cache ceilings (src/cache/module.ts) may be below them.
  // One DEL per key: each bucket's copy is in its own slot.
  const p = redis.pipeline();
  for (const k of [...keys.cacheCeilings("shop"), ...keys.cacheCeilings("seckill")]) p.del(k);
  await p.exec();

  const geoBar = bar("geo index", opts.shops, opts.quiet);
  let lastReported = 0;
  const geoIndexed = await rebuildShopGeo(db, redis, (done) => {
    geoBar.increment(Math.min(done, opts.shops) - lastReported);
    lastReported = Math.min(done, opts.shops);
  });
  geoBar.stop();

  let tokens = 0;
  if (opts.tokensFile) {
    if (!opts.sessionSecret) throw new Error("seed: writing tokens needs the app's SESSION_SECRET (sessionSecret)");
    const sessionKeys = new SessionKeys(opts.sessionSecret);
    const tokBar = bar("sessions", users.length, opts.quiet);
    const lines: string[] = [];
    // Bounded concurrency: the REST client auto-pipelines each burst into one request.
    for (let start = 0; start < users.length; start += 200) {
      const chunk = users.slice(start, start + 200);
      lines.push(...(await Promise.all(chunk.map((u) => createSession(redis, u, opts.tokenTtlSeconds, sessionKeys)))));
      tokBar.increment(chunk.length);
    }
    tokBar.stop();
    writeFileSync(opts.tokensFile, `${lines.join("\n")}\n`);
    tokens = lines.length;
  }
  return {
    shopTypes: SHOP_TYPES.length,
    shops: opts.shops,
    vouchers,
    users: users.length,
    notes,
    geoIndexed,
    tokens,
    images: stored,
  };
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      shops: { type: "string", default: "500" },
      users: { type: "string", default: "50" },
      notes: { type: "string", default: "20" },
      tokens: { type: "string" },
      "token-ttl": { type: "string", default: "86400" },
      seed: { type: "string", default: "42" },
    },
  });
  const num = (name: string, v: string | undefined) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) {
      console.error(`--${name} must be a non-negative integer`);
      process.exit(2);
    }
    return n;
  };
  const env = { ...loadStackEnv(), ...process.env };
  if (
    !env.DATABASE_URL ||
    !env.UPSTASH_REDIS_REST_URL ||
    !env.UPSTASH_REDIS_REST_TOKEN ||
    (values.tokens && !env.SESSION_SECRET)
  ) {
    console.error(
      "no stack settings: start the stack (`npm run stack` or `npm run dev`) or set DATABASE_URL and UPSTASH_REDIS_REST_* (and SESSION_SECRET with --tokens)",
    );
    process.exit(1);
  }
  const started = performance.now();
  const result = await seed(
    new Client({ url: env.DATABASE_URL }),
    new Redis({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN, enableTelemetry: false }),
    {
      shops: num("shops", values.shops),
      users: num("users", values.users),
      notes: num("notes", values.notes),
      tokensFile: values.tokens,
      tokenTtlSeconds: num("token-ttl", values["token-ttl"]),
      sessionSecret: env.SESSION_SECRET,
      randomSeed: num("seed", values.seed),
      blobs: seedBlobStore(env),
    },
  );
  console.log(JSON.stringify({ ...result, seconds: Math.round((performance.now() - started) / 100) / 10 }));
}

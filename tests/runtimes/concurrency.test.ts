/**
 * Runtime matrix, 50-way concurrent cold reads and writes (issue 15 item 4): on Bun, Deno and the
 * built Worker in workerd (tests/support/runtimes.ts), each started fresh (empty per-isolate
 * memory), 50 requests at once per group against data nothing has cached yet:
 *
 *   reads    GET /api/shop/{id} (50 ids; and 50× one id: the per-key single-flight), the shop-type
 *            list (its Redis entry deleted first), shops of a type (plain paging, and nearest first
 *            via GEO, which loads every listed shop through the cache), the voucher list (50 shops;
 *            and 50× one shop: the mutex strategy), GET /api/user/me (50 sessions this isolate
 *            never saw: the session sync)
 *   writes   PUT /api/blog/like/{id} (50 users, one note), POST /api/user/sign (50 users),
 *            PUT /api/follow/{id}/true (50 users, one target)
 *
 * Every answer must be a 2xx with the right body (compared with what the app's own loaders read
 * from MySQL), never a 5xx; the writes must have landed; and the runtime's log must have none of
 * workerd's cross-request reports. The data is written straight to MySQL (the services' insert
 * functions) so that no cache holds it before the first request.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Deps } from "../../src/deps.ts";
import { keys } from "../../src/redis/keys.ts";
import { addShopToGeo } from "../../src/services/shop-geo.ts";
import { insertShop, insertVoucher, loadShop, loadShopTypes, loadVouchersOfShop } from "../../src/services/shops.ts";
import { pollUntil, within } from "../support/child.ts";
import { east, HANGZHOU } from "../support/fixtures.ts";
import {
  type Answer,
  hazardLines,
  request,
  type RuntimeServer,
  seedBuyers,
  selectedRuntimes,
  stackAppEnv,
  startRuntime,
  statusCounts,
  guardedBy,
} from "../support/runtimes.ts";
import { getStack } from "../support/stack.ts";
import { publishNote } from "../../src/services/notes.ts";

const WAY = 50;
const REQUEST_TIMEOUT_MS = 15_000;
const GROUP_TIMEOUT_MS = 45_000;

let dir = "";
let failed = false;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "cityhub-matrix-concurrency-"));
});

afterAll(() => {
  if (failed || process.env.MATRIX_KEEP_DIR) console.error(`runtime matrix (concurrency): logs kept in ${dir}`);
  else if (dir) rmSync(dir, { recursive: true, force: true });
});

interface Fixture {
  typeId: number;
  /** Shops of `typeId`, ascending ids. */
  shops: number[];
  /** Shops of `geoTypeId`, nearest to HANGZHOU first. */
  geoTypeId: number;
  geoShops: number[];
  /** A shop nothing reads before the single-key group. */
  oneShop: number;
  /** Voucher per shop of `shops`, and the voucher shop read 50× at once. */
  vouchers: Map<number, number>;
  oneVoucherShop: number;
  users: { userId: number; token: string; nickName: string; icon: string }[];
  target: { userId: number; token: string };
  blogId: number;
}

const shopBody = (typeId: number, label: string, at: { x: number; y: number }) => ({
  name: `${label}-${crypto.randomUUID().slice(0, 8)}`,
  typeId,
  images: "/imgs/a.jpg",
  area: "matrix",
  address: `${label} road 1`,
  x: at.x,
  y: at.y,
  avgPrice: 80,
  openHours: "10:00-22:00",
});

/** Data for one runtime, written straight to MySQL (and the GEO index): cold everywhere. */
async function fixture(deps: Deps, label: string): Promise<Fixture> {
  const newType = async (name: string) =>
    Number(
      (
        await deps.db.execute("INSERT INTO tb_shop_type (name, icon, sort) VALUES (?, '', 98)", [
          `${name}-${crypto.randomUUID().slice(0, 6)}`,
        ])
      ).insertId,
    );
  const typeId = await newType(`${label}-type`);
  const geoTypeId = await newType(`${label}-geo`);
  const shops: number[] = [];
  for (let i = 0; i < WAY; i++)
    shops.push(await insertShop(deps, shopBody(typeId, `${label}-shop${i}`, east(HANGZHOU, 50 + i))));
  const geoShops: number[] = [];
  for (let i = 0; i < 25; i++) {
    const at = east(HANGZHOU, 20 * (i + 1));
    const id = await insertShop(deps, shopBody(geoTypeId, `${label}-geo${i}`, at));
    await addShopToGeo(deps.redis, { id, typeId: geoTypeId, ...at });
    geoShops.push(id);
  }
  const oneShop = await insertShop(deps, shopBody(typeId, `${label}-one`, HANGZHOU));
  const oneVoucherShop = await insertShop(deps, shopBody(typeId, `${label}-vone`, HANGZHOU));
  shops.sort((a, b) => a - b);
  const vouchers = new Map<number, number>();
  for (const shopId of [...shops, oneVoucherShop]) {
    vouchers.set(
      shopId,
      await insertVoucher(deps.db, {
        shopId,
        title: `${label} voucher ${shopId}`,
        subTitle: null,
        rules: null,
        payValue: 500,
        actualValue: 1000,
      }),
    );
  }
  const [target, ...users] = await seedBuyers(deps, WAY + 1);
  const blog = await publishNote(deps, (target as { userId: number }).userId, {
    shopId: oneShop,
    title: `${label} note`,
    content: "matrix",
    images: "/imgs/blogs/1/2/a.jpg",
  });
  if (!blog.ok) throw new Error("creating the note failed");
  return {
    typeId,
    shops,
    geoTypeId,
    geoShops,
    oneShop,
    vouchers,
    oneVoucherShop,
    users,
    target: target as Fixture["target"],
    blogId: blog.id,
  };
}

describe.each(selectedRuntimes())("runtime matrix: 50-way concurrent cold reads and writes on %s", (name) => {
  let server: RuntimeServer | undefined;
  let fx: Fixture | undefined;
  let logMark = 0;
  const fiveXX: string[] = [];

  const s = () => server as RuntimeServer;
  const f = () => {
    if (!fx) throw new Error("fixture missing (see beforeAll)");
    return fx;
  };
  const guarded = guardedBy(
    name,
    () => server,
    () => {
      failed = true;
    },
  );

  /** Sends the requests all at once; returns the answers in order (every 5xx is also recorded). */
  async function burst<T>(what: string, requests: (() => Promise<Answer<T>>)[]): Promise<Answer<T>[]> {
    const answers = await within(GROUP_TIMEOUT_MS, what, Promise.all(requests.map((r) => r())));
    for (const a of answers)
      if (a.status >= 500 || a.status === 0)
        fiveXX.push(`${what}: ${a.status} ${a.error ?? JSON.stringify(a.body)?.slice(0, 200)}`);
    return answers;
  }

  /** Every answer 200 with success:true (else the statuses and a sample, for the failure message). */
  function expectAllOk(what: string, answers: Answer[]) {
    const bad = answers.filter((a) => a.status !== 200 || a.body?.success !== true);
    expect({
      what,
      statuses: statusCounts(answers),
      sample: bad.slice(0, 2).map((a) => a.error ?? JSON.stringify(a.body).slice(0, 300)),
    }).toEqual({ what, statuses: { "200": answers.length }, sample: [] });
  }

  beforeAll(async () => {
    const stack = await getStack();
    server = await startRuntime(name, { dir, env: stackAppEnv(stack) });
    fx = await within(60_000, "the fixture", fixture(server.driver(), `cc-${name}`));
    // The shop-type list is one key for everybody: drop its Redis copy, so this isolate's first read is a miss.
    await server.driver().redis.del(keys.cache("shop-type", "all"));
    logMark = server.logSize();
  }, 120_000);

  afterAll(async () => {
    await server?.stop();
  }, 20_000);

  test(
    "GET /api/shop/{id}: 50 cold shops at once, each its own row",
    guarded(async () => {
      const { shops } = f();
      const answers = await burst(
        "shop by id",
        shops.map((id) => () => request(s().url, "GET", `/api/shop/${id}`, { timeoutMs: REQUEST_TIMEOUT_MS })),
      );
      expectAllOk("shop by id", answers);
      const expected = await Promise.all(shops.map((id) => loadShop(s().driver(), id)));
      expect(answers.map((a) => a.body?.data)).toEqual(expected);
    }),
    GROUP_TIMEOUT_MS + 15_000,
  );

  test(
    "GET /api/shop/{id}: one cold shop 50 times at once (the per-key single-flight)",
    guarded(async () => {
      const { oneShop } = f();
      const answers = await burst(
        "one shop",
        Array.from(
          { length: WAY },
          () => () => request(s().url, "GET", `/api/shop/${oneShop}`, { timeoutMs: REQUEST_TIMEOUT_MS }),
        ),
      );
      expectAllOk("one shop", answers);
      const expected = await loadShop(s().driver(), oneShop);
      expect(answers.map((a) => a.body?.data)).toEqual(Array.from({ length: WAY }, () => expected));
    }),
    GROUP_TIMEOUT_MS + 15_000,
  );

  test(
    "GET /api/shop-type/list: 50 at once on a cold list",
    guarded(async () => {
      const { typeId } = f();
      const answers = await burst(
        "shop types",
        Array.from(
          { length: WAY },
          () => () => request(s().url, "GET", "/api/shop-type/list", { timeoutMs: REQUEST_TIMEOUT_MS }),
        ),
      );
      expectAllOk("shop types", answers);
      const expected = await loadShopTypes(s().driver());
      for (const a of answers) expect(a.body?.data).toEqual(expected);
      expect((expected as { id: number }[]).some((t) => t.id === typeId)).toBe(true);
    }),
    GROUP_TIMEOUT_MS + 15_000,
  );

  test(
    "isolate memory added for abuse (the anonymous health memo, the miss meter): 50 anonymous /health and 50 unknown shop ids at once",
    guarded(async () => {
      const health = await burst(
        "anonymous health",
        Array.from({ length: WAY }, () => () => request(s().url, "GET", "/health", { timeoutMs: REQUEST_TIMEOUT_MS })),
      );
      expect(statusCounts(health)).toEqual({ "200": WAY });
      for (const a of health) expect(a.body?.data).toEqual({ ok: true, redis: "up", mysql: "up" });
      const unknown = await burst(
        "unknown shops",
        Array.from(
          { length: WAY },
          (_, i) => () => request(s().url, "GET", `/api/shop/${970_000_000 + i}`, { timeoutMs: REQUEST_TIMEOUT_MS }),
        ),
      );
      expect(statusCounts(unknown)).toEqual({ "200": WAY });
      for (const a of unknown) expect(a.body?.code).toBe("NOT_FOUND");
    }),
    GROUP_TIMEOUT_MS + 15_000,
  );

  test(
    "GET /api/shop/of/type: 10 pages × 5 at once, plain paging and nearest first (GEO, each shop through the cache)",
    guarded(async () => {
      const { typeId, shops, geoTypeId, geoShops, oneShop, oneVoucherShop } = f();
      const plainPages = Array.from({ length: 10 }, (_, i) => i + 1);
      const plain = await burst(
        "shops of type",
        plainPages.flatMap((p) =>
          Array.from(
            { length: 5 },
            () => () =>
              request(s().url, "GET", `/api/shop/of/type?typeId=${typeId}&current=${p}`, {
                timeoutMs: REQUEST_TIMEOUT_MS,
              }),
          ),
        ),
      );
      expectAllOk("shops of type", plain);
      const allOfType = [...shops, oneShop, oneVoucherShop].sort((a, b) => a - b);
      plain.forEach((a, i) => {
        const p = plainPages[Math.floor(i / 5)] as number;
        expect(((a.body?.data ?? []) as { id: number }[]).map((x) => x.id)).toEqual(
          allOfType.slice((p - 1) * 5, p * 5),
        );
      });

      const geoPages = [1, 2, 3, 4, 5];
      const near = await burst(
        "shops of type, nearest first",
        geoPages.flatMap((p) =>
          Array.from(
            { length: 10 },
            () => () =>
              request(
                s().url,
                "GET",
                `/api/shop/of/type?typeId=${geoTypeId}&current=${p}&x=${HANGZHOU.x}&y=${HANGZHOU.y}`,
                { timeoutMs: REQUEST_TIMEOUT_MS },
              ),
          ),
        ),
      );
      expectAllOk("shops of type, nearest first", near);
      const rows = new Map(
        (await Promise.all(geoShops.map((id) => loadShop(s().driver(), id)))).map((r) => [r?.id, r]),
      );
      near.forEach((a, i) => {
        const p = geoPages[Math.floor(i / 10)] as number;
        const list = a.body?.data as ({ id: number; distance: number } & Record<string, unknown>)[];
        expect(list.map((x) => x.id)).toEqual(geoShops.slice((p - 1) * 5, p * 5));
        for (const { distance, ...shop } of list) {
          expect(shop).toEqual(rows.get(shop.id) as unknown as typeof shop);
          expect(typeof distance).toBe("number");
        }
      });
    }),
    2 * GROUP_TIMEOUT_MS + 15_000,
  );

  test(
    "GET /api/voucher/list/{shopId}: 50 cold shops at once, and one cold shop 50 times at once (the mutex rebuild)",
    guarded(async () => {
      const { shops, oneVoucherShop, vouchers } = f();
      const distinct = await burst(
        "voucher lists",
        shops.map((id) => () => request(s().url, "GET", `/api/voucher/list/${id}`, { timeoutMs: REQUEST_TIMEOUT_MS })),
      );
      expectAllOk("voucher lists", distinct);
      const expected = await Promise.all(shops.map((id) => loadVouchersOfShop(s().driver(), id)));
      expect(distinct.map((a) => a.body?.data)).toEqual(expected);
      expect(distinct.map((a) => ((a.body?.data ?? []) as { id: number }[])[0]?.id)).toEqual(
        shops.map((id) => vouchers.get(id)),
      );

      const same = await burst(
        "one voucher list",
        Array.from(
          { length: WAY },
          () => () => request(s().url, "GET", `/api/voucher/list/${oneVoucherShop}`, { timeoutMs: REQUEST_TIMEOUT_MS }),
        ),
      );
      expectAllOk("one voucher list", same);
      const one = await loadVouchersOfShop(s().driver(), oneVoucherShop);
      expect(one.map((v) => v.id)).toEqual([vouchers.get(oneVoucherShop) as number]);
      for (const a of same) expect(a.body?.data).toEqual(one);
    }),
    2 * GROUP_TIMEOUT_MS + 15_000,
  );

  test(
    "GET /api/user/me: 50 sessions this isolate never saw, at once",
    guarded(async () => {
      const { users } = f();
      const answers = await burst(
        "me",
        users.map(
          (u) => () => request(s().url, "GET", "/api/user/me", { token: u.token, timeoutMs: REQUEST_TIMEOUT_MS }),
        ),
      );
      expectAllOk("me", answers);
      expect(answers.map((a) => a.body?.data)).toEqual(
        users.map((u) => ({ id: u.userId, nickName: u.nickName, icon: u.icon })),
      );
    }),
    GROUP_TIMEOUT_MS + 15_000,
  );

  test(
    "PUT /api/blog/like/{id}: 50 users like one note at once; all 50 likes land",
    guarded(async () => {
      const { users, blogId, target } = f();
      const answers = await burst(
        "likes",
        users.map(
          (u) => () =>
            request(s().url, "PUT", `/api/blog/like/${blogId}`, { token: u.token, timeoutMs: REQUEST_TIMEOUT_MS }),
        ),
      );
      expectAllOk("likes", answers);
      const d = s().driver();
      expect(await d.redis.zcard(keys.blogLiked(blogId))).toBe(WAY);
      // The note's count in MySQL follows (version-guarded writes; a failed one is retried in the background).
      await pollUntil(
        "the note's liked count in MySQL to reach 50",
        async () =>
          Number(
            ((await d.db.execute("SELECT liked FROM tb_blog WHERE id = ?", [blogId])).rows[0] as { liked: string })
              .liked,
          ) === WAY,
        15_000,
        100,
      );
      const likers = await request<{ id: number }[]>(s().url, "GET", `/api/blog/likes/${blogId}`, {
        token: target.token,
        timeoutMs: REQUEST_TIMEOUT_MS,
      });
      expect(likers.status).toBe(200);
      const ids = new Set(users.map((u) => u.userId));
      expect((likers.body?.data ?? []).length).toBe(5);
      expect((likers.body?.data ?? []).every((x) => ids.has(x.id))).toBe(true);
    }),
    GROUP_TIMEOUT_MS + 30_000,
  );

  test(
    "POST /api/user/sign: 50 users sign in at once; each one's streak is 1",
    guarded(async () => {
      const { users } = f();
      const answers = await burst(
        "sign",
        users.map(
          (u) => () => request(s().url, "POST", "/api/user/sign", { token: u.token, timeoutMs: REQUEST_TIMEOUT_MS }),
        ),
      );
      expectAllOk("sign", answers);
      const counts = await burst(
        "sign count",
        users.map(
          (u) => () =>
            request<number>(s().url, "GET", "/api/user/sign/count", { token: u.token, timeoutMs: REQUEST_TIMEOUT_MS }),
        ),
      );
      expectAllOk("sign count", counts);
      expect(counts.map((a) => a.body?.data)).toEqual(users.map(() => 1));
    }),
    2 * GROUP_TIMEOUT_MS + 15_000,
  );

  test(
    "PUT /api/follow/{id}/true: 50 users follow one user at once; every follow lands",
    guarded(async () => {
      const { users, target } = f();
      const answers = await burst(
        "follow",
        users.map(
          (u) => () =>
            request(s().url, "PUT", `/api/follow/${target.userId}/true`, {
              token: u.token,
              timeoutMs: REQUEST_TIMEOUT_MS,
            }),
        ),
      );
      expectAllOk("follow", answers);
      const check = await burst(
        "follow or not",
        users.map(
          (u) => () =>
            request<boolean>(s().url, "GET", `/api/follow/or/not/${target.userId}`, {
              token: u.token,
              timeoutMs: REQUEST_TIMEOUT_MS,
            }),
        ),
      );
      expectAllOk("follow or not", check);
      expect(check.map((a) => a.body?.data)).toEqual(users.map(() => true));
      const rows = (
        await s().driver().db.execute("SELECT COUNT(*) AS n FROM tb_follow WHERE follow_user_id = ?", [target.userId])
      ).rows[0] as { n: string };
      expect(Number(rows.n)).toBe(WAY);
    }),
    2 * GROUP_TIMEOUT_MS + 15_000,
  );

  test(
    'no 5xx in any group, and the runtime logged no "different request context", "hung" or "canceled" report',
    guarded(async () => {
      const lines = hazardLines(s().logSince(logMark));
      expect({
        fiveXX: fiveXX.slice(0, 5),
        hazards: lines.length,
        first: lines.slice(0, 3).map((l) => l.slice(0, 300)),
      }).toEqual({ fiveXX: [], hazards: 0, first: [] });
    }),
    10_000,
  );
});

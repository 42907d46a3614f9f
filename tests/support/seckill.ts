/** Seckill test helpers: vouchers through the operator route, buyers as real sessions or raw ids. */
import type { Deps } from "../../src/deps.ts";
import { RETIRE_AFTER_MS } from "../../src/services/seckill/registry.ts";
import { createSession } from "../../src/services/session.ts";
import { toSqlUtc } from "../../src/util/time.ts";
import type { TestApp } from "./stack.ts";
import { call } from "./http.ts";
import { createShop, createShopType, operator } from "./fixtures.ts";

export interface SeckillFixture {
  shopId: number;
  voucherId: number;
}

export async function createSeckill(
  t: TestApp,
  opts: {
    stock: number;
    buckets?: number;
    shopDailyLimit?: number;
    shopId?: number;
    beginMs?: number;
    endMs?: number;
    payValue?: number;
    /** Sent only when given (the classic body has neither). */
    purchaseRules?: { scope: "shop" | "campaign"; limit: number; days: number }[];
    campaign?: string;
  },
): Promise<SeckillFixture> {
  const shopId = opts.shopId ?? (await createShop(t, await createShopType(t)));
  const now = Date.now();
  const res = await call<number>(t.app, "POST", "/api/voucher/seckill", {
    token: operator(t),
    json: {
      shopId,
      title: "flash",
      payValue: opts.payValue ?? 8000,
      actualValue: 10000,
      stock: opts.stock,
      buckets: opts.buckets ?? 1,
      shopDailyLimit: opts.shopDailyLimit ?? 0,
      beginTime: opts.beginMs ?? now - 3600_000,
      endTime: opts.endMs ?? now + 3600_000,
      ...(opts.purchaseRules ? { purchaseRules: opts.purchaseRules } : {}),
      ...(opts.campaign !== undefined ? { campaign: opts.campaign } : {}),
    },
  });
  if (!res.body.success || typeof res.body.data !== "number")
    throw new Error(`create seckill failed: ${JSON.stringify(res.body)}`);
  return { shopId, voucherId: res.body.data };
}

let nextUser = 5_000_000 + Math.floor(Math.random() * 1_000_000) * 100;

/** Fresh user ids (no MySQL row needed: orders reference users by id only). */
export function userIds(n: number): number[] {
  const out = Array.from({ length: n }, (_, i) => nextUser + i);
  nextUser += n + 1;
  return out;
}

/** Sessions for raw user ids, created directly in Redis (bulk; the login flow has its own tests). */
export async function sessionsFor(t: TestApp, ids: number[]): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < ids.length; i += 500) {
    out.push(
      ...(await Promise.all(
        ids
          .slice(i, i + 500)
          .map((id) =>
            createSession(t.deps.redis, { id, nickName: `u${id}`, icon: "" }, 3600, t.deps.isolate.sessions.keys),
          ),
      )),
    );
  }
  return out;
}

export async function mysqlCounts(
  t: TestApp,
  voucherId: number,
): Promise<{ orders: number; active: number; stock: number }> {
  const row = (
    await t.deps.db.execute(
      `SELECT (SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ?) AS orders,
            (SELECT COUNT(*) FROM tb_voucher_order WHERE voucher_id = ? AND status IN (1, 2, 3)) AS active,
            (SELECT stock FROM tb_seckill_voucher WHERE voucher_id = ?) AS stock`,
      [voucherId, voucherId, voucherId],
    )
  ).rows[0] as { orders: string; active: string; stock: string | number };
  return { orders: Number(row.orders), active: Number(row.active), stock: Number(row.stock) };
}

/**
 * Ends `voucherIds` long ago and cancels their unpaid orders, so the jobs' registry of every later
 * test file of this process leaves them alone (those apps may have no shards configured).
 */
export async function retireVouchers(deps: Pick<Deps, "db">, voucherIds: readonly number[]): Promise<void> {
  if (voucherIds.length === 0) return;
  const inList = voucherIds.map(() => "?").join(", ");
  const end = Date.now() - RETIRE_AFTER_MS - 86_400_000;
  await deps.db.execute(`UPDATE tb_seckill_voucher SET begin_time = ?, end_time = ? WHERE voucher_id IN (${inList})`, [
    toSqlUtc(end - 3_600_000),
    toSqlUtc(end),
    ...voucherIds,
  ]);
  await deps.db.execute(`UPDATE tb_voucher_order SET status = 4 WHERE status = 1 AND voucher_id IN (${inList})`, [
    ...voucherIds,
  ]);
}

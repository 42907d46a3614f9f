/**
 * Seckill voucher configuration: what the reservation path needs to build its keys and what the
 * jobs need to reconcile. Immutable after creation, so it is cached hard (cache module `seckill`).
 */
import type { Deps } from "../../deps.ts";
import { keys } from "../../redis/keys.ts";
import { scriptsFor } from "../../redis/scripts.ts";
import { parseSqlUtc, toSqlUtc } from "../../util/time.ts";
import { forgetCeiling, insertVoucher, type VoucherInput } from "../shops.ts";
import { encodeRules, parseRulesColumn, type PurchaseRule } from "./rules.ts";
import { shardsOf, shareOf } from "./shards.ts";

export interface SeckillConfig {
  voucherId: number;
  shopId: number;
  initialStock: number;
  buckets: number;
  /** Max seckill orders per user per day across the shop; 0 = none. */
  dailyLimit: number;
  beginMs: number;
  endMs: number;
  /** Price, cents. */
  payValue: number;
  /**
   * Purchase-limit rules, canonical order (rules.ts); immutable like the rest. Optional only
   * because configs cached before rules existed lack it: absent = none.
   */
  purchaseRules?: readonly PurchaseRule[];
  /** The campaign (per shop) named by a campaign rule; null/absent = none. */
  campaign?: string | null;
  /**
   * Seckill shard databases holding the voucher (shards.ts): 0 = the main database (every voucher
   * created without SECKILL_SHARD_URLS). Fixed at creation. Absent in configs cached before
   * shards existed: 0.
   */
  shards?: number;
}

type Row = Record<string, string | number | null>;

/**
 * The columns seckillConfigFromRow reads, of tb_seckill_config c ⋈ tb_seckill_voucher s ⋈
 * tb_voucher v: every query that builds a SeckillConfig selects exactly these.
 */
export const SECKILL_CONFIG_COLUMNS =
  "c.voucher_id, c.shop_id, c.initial_stock, c.buckets, c.shop_daily_limit, c.campaign, c.purchase_rules, c.shards, s.begin_time, s.end_time, v.pay_value";

export async function loadSeckillConfig(deps: Deps, voucherId: number): Promise<SeckillConfig | null> {
  const row = (
    await deps.db.execute(
      `SELECT ${SECKILL_CONFIG_COLUMNS}
         FROM tb_seckill_config c
         JOIN tb_seckill_voucher s ON s.voucher_id = c.voucher_id
         JOIN tb_voucher v ON v.id = c.voucher_id
        WHERE c.voucher_id = ?`,
      [voucherId],
    )
  ).rows[0] as Row | undefined;
  return row ? seckillConfigFromRow(row) : null;
}

/** The largest seckill voucher id (0 with none): voucher ids are auto-increment, so every id above it is absent. */
export async function maxSeckillVoucherId(deps: Deps): Promise<number> {
  const row = (await deps.db.execute("SELECT COALESCE(MAX(voucher_id), 0) AS m FROM tb_seckill_config")).rows[0] as
    | Row
    | undefined;
  return Number(row?.m ?? 0);
}

/** A row of tb_seckill_config ⋈ tb_seckill_voucher ⋈ tb_voucher (the columns selected above). */
export function seckillConfigFromRow(row: Row): SeckillConfig {
  return {
    voucherId: Number(row.voucher_id),
    shopId: Number(row.shop_id),
    initialStock: Number(row.initial_stock),
    buckets: Number(row.buckets),
    dailyLimit: Number(row.shop_daily_limit),
    beginMs: parseSqlUtc(String(row.begin_time)),
    endMs: parseSqlUtc(String(row.end_time)),
    payValue: Number(row.pay_value),
    purchaseRules: parseRulesColumn(row.purchase_rules, Number(row.voucher_id)),
    campaign: row.campaign === null || row.campaign === undefined ? null : String(row.campaign),
    // Only when sharded: an unsharded voucher's config is exactly what it was before shards.
    ...(Number(row.shards ?? 0) > 0 ? { shards: Number(row.shards) } : {}),
  };
}

/** reload-seckill.lua's ARGV[1..7] for a config (sale window, stock, daily limit, rules, campaign, buckets). */
export function reloadArgs(cfg: SeckillConfig, initial = cfg.initialStock): string[] {
  return [
    String(cfg.beginMs),
    String(cfg.endMs),
    String(initial),
    String(cfg.dailyLimit),
    encodeRules(cfg.purchaseRules ?? []),
    cfg.campaign ?? "",
    String(cfg.buckets),
  ];
}

/** The buyer's home bucket (0-based). Users spread evenly; a buyer always starts at the same one. */
export function homeBucket(userId: number, buckets: number): number {
  return userId % buckets;
}

/** Every stock bucket key of a voucher, bucket 0 first. */
export function allBucketKeys(cfg: Pick<SeckillConfig, "shopId" | "voucherId" | "buckets">): string[] {
  return Array.from({ length: cfg.buckets }, (_, i) => keys.seckill.stock(cfg.shopId, cfg.voucherId, i));
}

/** Bucket keys in probe order for a buyer: home first, then the rest round-robin. */
export function bucketKeysFor(cfg: SeckillConfig, userId: number): string[] {
  const home = homeBucket(userId, cfg.buckets);
  return Array.from({ length: cfg.buckets }, (_, i) =>
    keys.seckill.stock(cfg.shopId, cfg.voucherId, (home + i) % cfg.buckets),
  );
}

/**
 * Loads a new voucher's stock, window and rules into Redis, only if Redis does not have it yet
 * (reload-seckill.lua with no orders: meta is written last and the whole load is skipped when meta
 * exists). So a creation-time load that lands after the reconcile job already loaded the voucher —
 * and buyers already reserved — cannot reset its stock to the initial value.
 */
export async function loadSeckillIntoRedis(
  deps: Pick<Deps, "redis" | "seckillShards">,
  cfg: SeckillConfig,
): Promise<boolean> {
  const { shopId, voucherId } = cfg;
  const bucketKeys = allBucketKeys(cfg);
  // Each shard its share (shards.ts); every shard is loaded, or the call fails and reconcile loads the rest.
  const shards = shardsOf(deps, cfg);
  const loaded = await Promise.all(
    shards.map(async ({ shard, redis }) => {
      const [done] = await scriptsFor(redis).reloadSeckill.exec(
        [
          keys.seckill.meta(shopId, voucherId),
          keys.seckill.released(shopId, voucherId),
          keys.seckill.buyers(shopId, voucherId),
          keys.seckill.outbox(shopId),
          keys.seckill.outboxDue(shopId),
          ...bucketKeys,
        ],
        [...reloadArgs(cfg, shareOf(cfg.initialStock, shards.length, shard)), "0"],
      );
      return done === 1;
    }),
  );
  // The legacy registry set (the jobs read MySQL now; kept for tools that list it).
  await deps.redis.sadd(keys.seckill.active(), `${shopId}:${voucherId}`);
  return loaded.every(Boolean);
}

export interface NewSeckill extends VoucherInput {
  stock: number;
  beginMs: number;
  endMs: number;
  buckets: number;
  dailyLimit: number;
  /** Checked by the caller (rules.ts checkRules): canonical, campaign iff a campaign rule. */
  purchaseRules?: readonly PurchaseRule[];
  campaign?: string | null;
}

/**
 * Creates the voucher rows in one MySQL transaction, then loads Redis. If the Redis step fails the
 * call fails; the voucher exists in MySQL and the reconcile job loads it on its next pass.
 */
/** A campaign already registered with another rule (tb_seckill_campaign): the creation is refused, nothing written. */
export class CampaignRuleConflict extends Error {
  constructor(
    readonly campaign: string,
    readonly registered: { limit: number; days: number },
  ) {
    super(
      `campaign "${campaign}" already has the rule ${registered.limit} per user in ${registered.days} days: every voucher of a campaign carries the same rule`,
    );
    this.name = "CampaignRuleConflict";
  }
}

export async function createSeckillVoucher(
  deps: Pick<Deps, "db" | "redis" | "seckillShards">,
  v: NewSeckill,
): Promise<SeckillConfig> {
  const rules = [...(v.purchaseRules ?? [])];
  const campaignRule = rules.find((r) => r.scope === "campaign");
  // The shards configured now, for the voucher's life (shards.ts). Every voucher created under one
  // configuration takes all of them, even a sale with fewer units than shards (those start with a
  // share of 0 and refill): a buyer's home shard — where the daily shop limit and the purchase-rule
  // logs of the shop live — must be the same for every voucher of the shop.
  const shards = deps.seckillShards.length;
  const voucherId = await deps.db.transaction(async (tx) => {
    if (campaignRule && v.campaign) {
      // The first voucher registers the campaign's rule; a concurrent creation waits on this row's
      // exclusive lock (ON DUPLICATE KEY takes it at once: INSERT IGNORE's shared lock, upgraded,
      // deadlocked two creations) and then compares against what committed. Before any other
      // write: a refusal writes nothing.
      await tx.execute(
        "INSERT INTO tb_seckill_campaign (shop_id, campaign, rule_limit, rule_days) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE shop_id = shop_id",
        [v.shopId, v.campaign, campaignRule.limit, campaignRule.days],
      );
      const row = (
        await tx.execute("SELECT rule_limit, rule_days FROM tb_seckill_campaign WHERE shop_id = ? AND campaign = ?", [
          v.shopId,
          v.campaign,
        ])
      ).rows[0] as { rule_limit: string | number; rule_days: string | number };
      const registered = { limit: Number(row.rule_limit), days: Number(row.rule_days) };
      if (registered.limit !== campaignRule.limit || registered.days !== campaignRule.days)
        throw new CampaignRuleConflict(v.campaign, registered);
    }
    const id = await insertVoucher(tx, v, 1);
    await tx.execute("INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time) VALUES (?, ?, ?, ?)", [
      id,
      v.stock,
      toSqlUtc(v.beginMs),
      toSqlUtc(v.endMs),
    ]);
    await tx.execute(
      "INSERT INTO tb_seckill_config (voucher_id, shop_id, initial_stock, buckets, shop_daily_limit, campaign, purchase_rules, shards) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
      [
        id,
        v.shopId,
        v.stock,
        v.buckets,
        v.dailyLimit,
        v.campaign ?? null,
        rules.length > 0 ? JSON.stringify(rules) : null,
        shards,
      ],
    );
    return id;
  });
  await forgetCeiling(deps, "seckill", voucherId);
  const cfg: SeckillConfig = {
    voucherId,
    shopId: v.shopId,
    initialStock: v.stock,
    buckets: v.buckets,
    dailyLimit: v.dailyLimit,
    beginMs: v.beginMs,
    endMs: v.endMs,
    payValue: v.payValue,
    purchaseRules: rules,
    campaign: v.campaign ?? null,
    ...(shards > 0 ? { shards } : {}),
  };
  await loadSeckillIntoRedis(deps, cfg);
  return cfg;
}

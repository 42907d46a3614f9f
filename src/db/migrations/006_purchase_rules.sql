-- Purchase-limit rules of seckill vouchers (issue 11, src/services/seckill/rules.ts): "at most K
-- orders per user across this shop / this campaign over N days", set at creation, immutable.
-- purchase_rules: JSON text [{"scope":"shop"|"campaign","limit":K,"days":N}] in canonical order
-- (shop first), NULL = none; at most one rule per scope, so it stays short. campaign: the
-- campaign a campaign rule counts across (per shop: the Redis rule logs live under the shop's
-- hash tag), NULL iff there is no campaign rule. Existing vouchers get neither: no rules.
ALTER TABLE tb_seckill_config
  ADD COLUMN campaign VARCHAR(64) NULL COMMENT 'campaign id (per shop) of a campaign rule, NULL = none',
  ADD COLUMN purchase_rules VARCHAR(255) NULL COMMENT 'JSON [{scope, limit, days}], NULL = none',
  ADD KEY idx_shop_campaign (shop_id, campaign);

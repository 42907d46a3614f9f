-- A campaign's purchase rule belongs to the campaign, once (issue 16 item 8): two vouchers of one
-- campaign carried different limits, so "1 per user" allowed 2 depending on purchase order. The
-- first seckill voucher naming a campaign registers its rule here (per shop, like the Redis rule
-- logs); every later voucher naming it must carry the same rule, or its creation is refused and
-- nothing is written (src/services/seckill/config.ts, in the creation's transaction). Campaigns of
-- vouchers created before this migration register with the next voucher that names them.
CREATE TABLE IF NOT EXISTS tb_seckill_campaign (
  shop_id BIGINT UNSIGNED NOT NULL,
  campaign VARCHAR(64) NOT NULL,
  rule_limit INT UNSIGNED NOT NULL COMMENT 'K: orders per user',
  rule_days INT UNSIGNED NOT NULL COMMENT 'N: window, days',
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (shop_id, campaign)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_unicode_ci;

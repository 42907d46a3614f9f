-- Seckill configuration and the payment side of the order lifecycle (architecture.md §5).
-- tb_seckill_config keeps what the classic tb_seckill_voucher lacks: the initial stock (the
-- reconcile job's reference), the Redis bucket count, the purchase rules, and the shop, whose id
-- is the Redis hash tag of every key the reservation script touches.
CREATE TABLE IF NOT EXISTS tb_seckill_config (
  voucher_id BIGINT UNSIGNED NOT NULL,
  shop_id BIGINT UNSIGNED NOT NULL,
  initial_stock INT NOT NULL,
  buckets SMALLINT UNSIGNED NOT NULL DEFAULT 1 COMMENT 'Redis stock buckets (1 = one key)',
  shop_daily_limit INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'max seckill orders per user per day across the shop, 0 = none',
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (voucher_id),
  KEY idx_shop (shop_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- One row per payment attempt. status: 1 pending, 2 succeeded, 3 failed.
CREATE TABLE IF NOT EXISTS tb_payment (
  id BIGINT NOT NULL COMMENT 'application-generated 64-bit id',
  order_id BIGINT NOT NULL,
  user_id BIGINT UNSIGNED NOT NULL,
  amount BIGINT UNSIGNED NOT NULL COMMENT 'cents',
  status TINYINT UNSIGNED NOT NULL DEFAULT 1,
  provider_ref VARCHAR(64) NULL,
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  KEY idx_order (order_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- A refund owed because money arrived for an order that was already cancelled (or paid twice).
-- One refund per payment. status: 1 requested, 2 succeeded, 3 failed.
CREATE TABLE IF NOT EXISTS tb_refund (
  id BIGINT NOT NULL COMMENT 'application-generated 64-bit id',
  payment_id BIGINT NOT NULL,
  order_id BIGINT NOT NULL,
  amount BIGINT UNSIGNED NOT NULL COMMENT 'cents',
  reason VARCHAR(64) NOT NULL,
  status TINYINT UNSIGNED NOT NULL DEFAULT 1,
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  UNIQUE KEY uniq_payment (payment_id),
  KEY idx_order (order_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

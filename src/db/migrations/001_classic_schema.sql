-- The classic hm-dianping tables, names and columns kept so existing data imports, with the
-- classic defects fixed (architecture.md §4):
--   * no zero dates: every timestamp has a real default, optional ones are NULL;
--   * tb_follow has UNIQUE(user_id, follow_user_id) (the classic table allowed duplicates);
--   * tb_voucher_order.id is an application-generated 64-bit id (no AUTO_INCREMENT);
--   * an index serves the unpaid-order sweep (status, create_time);
--   * stock can never go negative in MySQL (CHECK constraint, honoured by MySQL 8.0.16+ and MariaDB).
-- Amounts are in cents. Times are stored in UTC; the API renders them in SERVICE_TIME_ZONE.
-- Portable between MySQL 8 (PlanetScale) and MariaDB 10.11: no utf8mb4_0900_* collations, no
-- foreign keys (PlanetScale/Vitess does not enforce them), IF NOT EXISTS so a re-run is harmless.

CREATE TABLE IF NOT EXISTS tb_user (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  phone VARCHAR(11) NOT NULL,
  password VARCHAR(128) NOT NULL DEFAULT '',
  nick_name VARCHAR(32) NOT NULL DEFAULT '',
  icon VARCHAR(255) NOT NULL DEFAULT '',
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  UNIQUE KEY uniqe_key_phone (phone)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS tb_user_info (
  user_id BIGINT UNSIGNED NOT NULL,
  city VARCHAR(64) NOT NULL DEFAULT '',
  introduce VARCHAR(128) NULL,
  fans INT UNSIGNED NOT NULL DEFAULT 0,
  followee INT UNSIGNED NOT NULL DEFAULT 0,
  gender TINYINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '0 male, 1 female',
  birthday DATE NULL,
  credits INT UNSIGNED NOT NULL DEFAULT 0,
  level TINYINT UNSIGNED NOT NULL DEFAULT 0,
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS tb_shop_type (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  name VARCHAR(32) NOT NULL,
  icon VARCHAR(255) NOT NULL DEFAULT '',
  sort INT UNSIGNED NOT NULL DEFAULT 0,
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS tb_shop (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  name VARCHAR(128) NOT NULL,
  type_id BIGINT UNSIGNED NOT NULL,
  images VARCHAR(1024) NOT NULL DEFAULT '' COMMENT 'comma-separated image paths',
  area VARCHAR(128) NULL,
  address VARCHAR(255) NOT NULL,
  x DOUBLE NOT NULL COMMENT 'longitude',
  y DOUBLE NOT NULL COMMENT 'latitude',
  avg_price BIGINT UNSIGNED NULL COMMENT 'yuan per person, as in the classic data',
  sold INT UNSIGNED NOT NULL DEFAULT 0,
  comments INT UNSIGNED NOT NULL DEFAULT 0,
  score INT UNSIGNED NOT NULL DEFAULT 0 COMMENT '1..50, 10x the star rating',
  open_hours VARCHAR(32) NULL,
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  KEY idx_type_id (type_id),
  KEY idx_name (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS tb_voucher (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  shop_id BIGINT UNSIGNED NULL,
  title VARCHAR(255) NOT NULL,
  sub_title VARCHAR(255) NULL,
  rules VARCHAR(1024) NULL,
  pay_value BIGINT UNSIGNED NOT NULL COMMENT 'cents',
  actual_value BIGINT NOT NULL COMMENT 'cents',
  type TINYINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '0 normal, 1 seckill',
  status TINYINT UNSIGNED NOT NULL DEFAULT 1 COMMENT '1 on sale, 2 off sale, 3 expired',
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  KEY idx_shop_id (shop_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS tb_seckill_voucher (
  voucher_id BIGINT UNSIGNED NOT NULL,
  stock INT NOT NULL,
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  begin_time DATETIME NOT NULL,
  end_time DATETIME NOT NULL,
  update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (voucher_id),
  CONSTRAINT chk_seckill_stock_non_negative CHECK (stock >= 0),
  CONSTRAINT chk_seckill_window CHECK (end_time > begin_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS tb_voucher_order (
  id BIGINT NOT NULL COMMENT 'application-generated, time-ordered 64-bit id',
  user_id BIGINT UNSIGNED NOT NULL,
  voucher_id BIGINT UNSIGNED NOT NULL,
  pay_type TINYINT UNSIGNED NOT NULL DEFAULT 1 COMMENT '1 balance, 2 alipay, 3 wechat',
  status TINYINT UNSIGNED NOT NULL DEFAULT 1 COMMENT '1 unpaid, 2 paid, 3 used, 4 cancelled, 5 refunding, 6 refunded',
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  pay_time DATETIME NULL,
  use_time DATETIME NULL,
  refund_time DATETIME NULL,
  update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  KEY idx_user (user_id, id),
  KEY idx_voucher_user (voucher_id, user_id),
  KEY idx_status_create (status, create_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS tb_blog (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  shop_id BIGINT UNSIGNED NOT NULL,
  user_id BIGINT UNSIGNED NOT NULL,
  title VARCHAR(255) NOT NULL,
  images VARCHAR(2048) NOT NULL DEFAULT '' COMMENT 'comma-separated, at most 9',
  content VARCHAR(2048) NOT NULL,
  liked INT UNSIGNED NOT NULL DEFAULT 0,
  comments INT UNSIGNED NOT NULL DEFAULT 0,
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  KEY idx_user (user_id, id),
  KEY idx_liked (liked)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS tb_blog_comments (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  user_id BIGINT UNSIGNED NOT NULL,
  blog_id BIGINT UNSIGNED NOT NULL,
  parent_id BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '0 for a top-level comment',
  answer_id BIGINT UNSIGNED NOT NULL DEFAULT 0,
  content VARCHAR(255) NOT NULL,
  liked INT UNSIGNED NOT NULL DEFAULT 0,
  status TINYINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '0 normal, 1 reported, 2 hidden',
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  update_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  KEY idx_blog (blog_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS tb_follow (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  user_id BIGINT UNSIGNED NOT NULL,
  follow_user_id BIGINT UNSIGNED NOT NULL,
  create_time DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
  PRIMARY KEY (id),
  UNIQUE KEY uniq_user_follow (user_id, follow_user_id),
  KEY idx_follow_user (follow_user_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

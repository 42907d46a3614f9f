-- Seckill stock sharded across Redis databases (issue 18): how many shard databases a voucher's
-- keys live in, fixed when it is created (0 = the main database, as every voucher before this).
-- A voucher keeps its count for life, so its buyers' home shards (hash(userId) % shards) never
-- move while it sells; a deployment may add shard databases, never remove one a live voucher uses.
ALTER TABLE tb_seckill_config ADD COLUMN IF NOT EXISTS shards INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'Redis shard databases holding the voucher (0 = main)';

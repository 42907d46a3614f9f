-- The jobs' registry of seckill vouchers is read from MySQL (services/seckill/registry.ts):
-- vouchers whose sale ends after a cutoff.
ALTER TABLE tb_seckill_voucher ADD KEY idx_end_time (end_time);

-- Payments (issue 8): at most one charge in flight per order, and refunds retried until they succeed.
--
-- Before the unique key can exist, orders that already have several pending payments (the old
-- concurrent-pay race) keep only their first one pending; the others are marked failed. That is
-- safe even if they were charged: a payment.succeeded after payment.failed is still applied (the
-- order is paid, or the money refunded). Harmless when re-run.
UPDATE tb_payment p
  JOIN (SELECT order_id, MIN(id) AS keep_id FROM tb_payment WHERE status = 1 GROUP BY order_id HAVING COUNT(*) > 1) d ON d.order_id = p.order_id
  SET p.status = 3
  WHERE p.status = 1 AND p.id <> d.keep_id;

-- pending_order_id is the order id while the payment is pending (status 1) and NULL otherwise; the
-- unique key on it lets only one pending payment exist per order, across every isolate. A new
-- charge becomes possible when the pending one fails. (Succeeded payments need no slot: the
-- order is then paid, refunding or refunded, and no longer payable.)
ALTER TABLE tb_payment
  ADD COLUMN pending_order_id BIGINT GENERATED ALWAYS AS (CASE WHEN status = 1 THEN order_id END) STORED COMMENT 'order_id while pending, else NULL',
  ADD UNIQUE KEY uniq_pending_order (pending_order_id);

-- Refund delivery state, for the refund-retry job and GET /admin/refunds. status: 1 requested
-- (asked, or about to be; awaiting the provider), 2 succeeded, 3 failed (will be retried).
-- next_attempt_at: when the job asks the provider (again); NULL once succeeded. UTC.
ALTER TABLE tb_refund
  ADD COLUMN attempts INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'provider refund requests made',
  ADD COLUMN last_error VARCHAR(255) NULL,
  ADD COLUMN next_attempt_at DATETIME NULL,
  ADD COLUMN provider_ref VARCHAR(64) NULL,
  ADD KEY idx_due (status, next_attempt_at);

-- Refunds recorded before this migration were asked once; let the job pick up the unfinished ones.
UPDATE tb_refund SET attempts = 1, next_attempt_at = update_time WHERE status IN (1, 3) AND next_attempt_at IS NULL;

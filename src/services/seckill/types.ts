/** Shared shapes of the order lifecycle. */

/** A reservation as written to the Redis outbox and carried by the order message. */
export interface Reservation {
  /** 64-bit order id, decimal string. */
  orderId: string;
  userId: number;
  voucherId: number;
  shopId: number;
  /** Epoch ms when Redis took the unit. */
  reservedAt: number;
  /** Price, cents. */
  amount: number;
  /** Seckill shard holding it (services/seckill/shards.ts); absent for an unsharded voucher. */
  shard?: number;
}

/** tb_voucher_order.status. */
export const OrderStatus = {
  unpaid: 1,
  paid: 2,
  used: 3,
  cancelled: 4,
  refunding: 5,
  refunded: 6,
} as const;
export type OrderStatusName = keyof typeof OrderStatus | "queued";

export function statusName(code: number): OrderStatusName {
  const found = (Object.entries(OrderStatus) as [keyof typeof OrderStatus, number][]).find(([, v]) => v === code);
  if (!found) throw new Error(`unknown order status ${code}`);
  return found[0];
}

/**
 * The jobs' registry of seckill vouchers, read from MySQL (the source of truth): every voucher
 * whose sale has not ended, or ended less than RETIRE_AFTER_MS ago. A voucher whose Redis load
 * failed at creation, or whose Redis data was lost, is therefore still visited by the sweep,
 * close-expired and reconcile (which reloads it). Upcoming sales are included so that a failed
 * load is repaired before the sale opens.
 */
import type { Deps } from "../../deps.ts";
import { toSqlUtc } from "../../util/time.ts";
import { SECKILL_CONFIG_COLUMNS, seckillConfigFromRow, type SeckillConfig } from "./config.ts";

/** Ended vouchers stay in the registry this long, ms (unpaid orders are closed long before). */
export const RETIRE_AFTER_MS = 7 * 86_400_000;

type Row = Record<string, string | number | null>;

/** Seckill vouchers the jobs visit at `now`, with their configuration (served by idx on end_time). */
export async function registeredSeckills(deps: Pick<Deps, "db">, now: number): Promise<SeckillConfig[]> {
  const rows = (
    await deps.db.execute(
      `SELECT ${SECKILL_CONFIG_COLUMNS}
         FROM tb_seckill_voucher s
         JOIN tb_seckill_config c ON c.voucher_id = s.voucher_id
         JOIN tb_voucher v ON v.id = s.voucher_id
        WHERE s.end_time > ?
        ORDER BY s.voucher_id`,
      [toSqlUtc(now - RETIRE_AFTER_MS)],
    )
  ).rows as Row[];
  return rows.map(seckillConfigFromRow);
}

/** Distinct shops of the registry (the outbox is per shop). */
export function shopsOf(cfgs: readonly SeckillConfig[]): number[] {
  return [...new Set(cfgs.map((c) => c.shopId))];
}

/**
 * Shapes of `data` of the operator routes (/admin/*) in the reference: the typed snapshots of
 * services/ops.ts, services/dlq.ts and the reports they carry, as zod schemas (documentation
 * only: nothing parses with them). Each is tied to the type it documents by `Describes` below, so
 * the type checker fails when a snapshot gains, loses or retypes a field the schema does not
 * follow. Times are epoch milliseconds, as the snapshots carry them.
 */
import { z } from "zod";
import type { HotReport as HotReportType } from "../cache/hot.ts";
import { DEPENDENCIES, type DependencyName, type GuardSnapshot } from "../resilience.ts";
import type { BulkOutcome as BulkOutcomeType, DeadLetterPage as DeadLetterPageType } from "../services/dlq.ts";
import {
  type CacheReport as CacheReportType,
  OUTBOX_COUNT_MAX,
  type OpsSnapshot as OpsSnapshotType,
  type OrderView as OrderViewType,
  type PipelineBacklog as PipelineBacklogType,
  type SaleRow as SaleRowType,
  type SeckillView as SeckillViewType,
} from "../services/ops.ts";
import type { ReconcileReport as ReconcileReportType } from "../services/seckill/reconcile.ts";
import { OrderStatus } from "../services/seckill/types.ts";
import type { VoucherRow as VoucherRowType } from "../services/vouchers.ts";

/**
 * `T` (a service's type) fits schema `S`: every value of `T` is what `S` documents, and `T` has no
 * top-level field `S` leaves out. Used as `type _ = Assert<Describes<typeof S, T>>`.
 */
export type Describes<S extends z.ZodType, T> = [T] extends [z.output<S>]
  ? [Exclude<keyof T, keyof z.output<S>>] extends [never]
    ? true
    : false
  : false;
export type Assert<T extends true> = T;

const int = () => z.number().int();
const EpochMs = z.number().int().describe("epoch milliseconds");

// ---------------------------------------------------------------------------------------------
// Breakers, caches

export const Guard = z.object({
  state: z.enum(["closed", "open", "halfOpen", "isolated"]),
  timeoutMs: int().describe(
    "the deadline a call starting now gets, ms (adaptive: p99 × factor within floor and ceiling)",
  ),
  ceilingMs: int().describe("the longest a call may wait, ms"),
  p99Ms: z.number().nullable().describe("rolling p99 of recent answer times, ms; null until 8 answers"),
  calls: int().describe("calls started, including those refused while open"),
  inFlight: int().describe("calls waiting for an answer now"),
  failures: int().describe("unexcused timeouts + other failures"),
  timeouts: int().describe("deadlines missed, excused or not"),
  rejected: int().describe("calls refused without calling (open, or half-open with its probes taken)"),
  opened: int().describe("times the breaker opened"),
  starved: int().describe("of `timeouts`: deadlines missed because this isolate's event loop was busy (not failures)"),
  queued: int().describe("of `timeouts`: missed while the dependency answered other calls (not failures)"),
  extended: int().describe("deadlines extended to the ceiling for a queued or starved caller"),
  lastOpenedAt: EpochMs.nullable(),
  lastFailure: z.string().nullable().describe("the last failure's message, scrubbed"),
  retryAfterSeconds: int().describe("seconds until a probe may run (0 unless open)"),
});
export const Breakers = z
  .record(z.enum(DEPENDENCIES as [DependencyName, ...DependencyName[]]), Guard)
  .describe("this isolate's breaker per dependency");

const Counters = z.object({
  l1Hits: int(),
  l2Hits: int(),
  staleServes: int(),
  originLoads: int(),
  nullHits: int(),
  errors: int(),
});
export const CacheReport = z.object({
  modules: z
    .record(
      z.string(),
      Counters.extend({ hitRatio: z.number().describe("(l1Hits + l2Hits + staleServes) / served, 4 decimals") }),
    )
    .describe("per cache module, summed across isolates"),
  isolates: int().describe("isolates that reported"),
  thisIsolate: z.record(z.string(), Counters).describe("the answering isolate's own counters"),
});

const HotKeyRule = z.object({ reads: int(), windowMs: int(), l1TtlMs: int(), maxPromoted: int(), reportTop: int() });
export const HotReport = z.object({
  rule: HotKeyRule,
  minutes: z.array(int()).describe("the minutes merged (epoch minutes)"),
  top: z
    .array(z.object({ module: z.string(), key: z.string(), reads: int(), isolates: int() }))
    .describe("across isolates, hottest first"),
  promotedHere: z
    .array(z.object({ module: z.string(), key: z.string() }))
    .describe("keys promoted in the answering isolate"),
});
/** GET /admin/cache/hot: `rule` null when hot keys are off (HOT_KEY_READS=0). */
export const HotReportOrOff = HotReport.extend({ rule: HotKeyRule.nullable() });

// ---------------------------------------------------------------------------------------------
// Order pipeline, reconcile, refunds

export const WriterStats = z.object({
  reservations: int(),
  flushes: int(),
  redisCommands: int().describe("Redis commands sent by index flushes"),
  drainPublishes: int(),
  publishFailures: int(),
  closePublishes: int(),
  drained: int().describe("orders written to MySQL by this isolate's writer"),
  lockConflicts: z
    .object({ retried: int(), exhausted: int() })
    .describe("MySQL lock conflicts met by the writer and closer"),
});
const OutboxBacklog = {
  pending: int().describe("reservations waiting for MySQL"),
  lagMs: int().describe("how late the oldest claimable one is"),
};
export const PipelineBacklog = z.object({
  at: EpochMs,
  shops: z
    .array(
      z.object({
        shopId: int(),
        ...OutboxBacklog,
        shards: z
          .array(z.object({ shard: int(), ...OutboxBacklog }))
          .describe(
            "the shop's outboxes in seckill shards that hold entries (empty when none); `pending` minus their sum is the main database's",
          ),
      }),
    )
    .describe(
      "shops with reservations waiting, summed over their outboxes (the main database's and one per seckill shard)",
    ),
  isolate: WriterStats.describe("this isolate's writer counters"),
});

const ShardReport = z.object({
  shard: int(),
  initial: int().describe("the shard's share (moved with the stock)"),
  redisStock: int(),
  buyers: int(),
  pending: int(),
  activeOrders: int(),
  ok: z.boolean(),
  drift: z.array(z.string()),
  repaired: z.array(z.string()),
});
const VoucherReport = z.object({
  voucherId: int(),
  shopId: int(),
  initial: int(),
  redisStock: int(),
  buyers: int(),
  pending: int().describe("reservations in the outbox not yet in MySQL"),
  mysqlStock: int(),
  activeOrders: int().describe("orders holding a unit: unpaid, paid, used"),
  ok: z.boolean(),
  drift: z.array(z.string()),
  repaired: z.array(z.string()),
  shards: z.array(ShardReport).optional().describe("a sharded voucher's shards, each checked on its own"),
});
export const ReconcileReport = z.object({ at: EpochMs, vouchers: z.array(VoucherReport) });
/** GET /admin/reconcile: `at` null before the first run. */
export const ReconcileReportOrNone = ReconcileReport.extend({ at: EpochMs.nullable() });

const RefundFields = {
  id: z.string(),
  paymentId: z.string(),
  orderId: z.string().describe("64-bit order id, as a decimal string"),
  amount: int().describe("cents"),
  reason: z.string(),
  state: z.enum(["requested", "succeeded", "failed"]),
  attempts: int(),
  lastError: z.string().nullable(),
  providerRef: z.string().nullable(),
};
export const RefundView = z.object({
  ...RefundFields,
  nextAttemptAt: EpochMs.nullable(),
  createTime: EpochMs,
  updateTime: EpochMs,
});
const DateTime = z.string().describe("YYYY-MM-DDTHH:mm:ss in the service's time zone");
/** GET /admin/refunds (times in the service zone, as it always answered). */
export const RefundOut = z.object({
  ...RefundFields,
  nextAttemptAt: DateTime.nullable(),
  createTime: DateTime,
  updateTime: DateTime,
});

// ---------------------------------------------------------------------------------------------
// Limiters, visitors, the operations snapshot

const AdmissionSnapshot = z.object({
  limits: z.object({ perVoucher: int(), total: int() }).nullable().describe("null when admission is off"),
  stats: z.object({ leases: int(), granted: int(), refused: int(), blockedFromMemory: int() }),
  vouchers: int(),
  gates: z.array(
    z.object({
      voucherId: int(),
      shard: int().optional(),
      tokens: int(),
      spent: z.boolean(),
      seen: int(),
      leasing: z.boolean(),
    }),
  ),
  blocks: int(),
  blocksActive: int(),
});
const ListingLimitSnapshot = z.object({
  limit: int(),
  windowMs: int(),
  tracked: int(),
  max: int(),
  blocked: int(),
  pendingSync: int(),
  lastSyncAt: EpochMs.nullable(),
  top: z.array(z.object({ address: z.string(), estimate: z.number(), blocked: z.boolean() })),
});
const UvReport = z.object({
  from: z.string(),
  to: z.string(),
  days: z.array(z.object({ date: z.string(), uv: int() })),
  total: int(),
});

export const OpsSnapshot = z.object({
  at: EpochMs,
  unavailable: z
    .array(z.object({ section: z.string(), error: z.string() }))
    .describe("sections shown empty because their dependency did not answer"),
  breakers: Breakers,
  admission: AdmissionSnapshot.describe("this isolate's seckill admission memory"),
  listing: ListingLimitSnapshot.nullable().describe("this isolate's listing limiter; null when off"),
  reconcile: ReconcileReport.nullable(),
  cache: CacheReport,
  hot: HotReport.nullable(),
  uv: UvReport.describe("unique visitors over the last 7 service days"),
  refunds: z.array(RefundView).describe("the newest 20"),
  writer: WriterStats,
});

// ---------------------------------------------------------------------------------------------
// Sales, vouchers, orders

const SaleState = z.enum(["upcoming", "on sale", "sold out", "ended"]);
export const SaleRow = z.object({
  voucherId: int(),
  shopId: int(),
  initial: int(),
  stockLeft: int().describe("Redis, all buckets of every shard read"),
  beginMs: EpochMs,
  endMs: EpochMs,
  state: SaleState,
  shards: int().describe("seckill shard databases holding the voucher; 0 = the main database"),
  unreadShards: int().describe(
    "of `shards`, those this deployment does not have (not configured): left out of `stockLeft`",
  ),
});

const SeckillShard = z.object({
  shard: int(),
  stock: int().describe("units left in the shard"),
  buckets: z.array(int()).describe("units left per bucket"),
  buyers: int().describe("buyers homed in the shard holding a unit: what it sold"),
  share: int()
    .nullable()
    .describe(
      "the shard's share of the stock (its initial, moved with the stock: stock + buyers = share); null = not loaded",
    ),
  outbox: z.object({
    pending: int()
      .nullable()
      .describe(
        `this voucher's reservations waiting for MySQL in the shard; null when the shop's outbox there is too big to count (over ${OUTBOX_COUNT_MAX} entries)`,
      ),
    shopPending: int().describe("entries of the shop's outbox in the shard (every voucher of the shop)"),
    lagMs: int().describe("how late the oldest claimable entry of that outbox is"),
  }),
});
export const SeckillView = z.object({
  at: EpochMs,
  voucherId: int(),
  shopId: int(),
  beginMs: EpochMs,
  endMs: EpochMs,
  state: SaleState,
  initialStock: int(),
  buckets: int().describe("stock buckets per shard"),
  shardCount: int().describe(
    "seckill shard databases holding the voucher; 0 = the main database (`shards` is then one entry, shard 0)",
  ),
  stock: int().describe("units left in Redis, all shards"),
  buyers: int().describe("buyers holding a unit, all shards"),
  sold: int().describe("initialStock − stock"),
  unaccounted: int().describe("sold − buyers: units in a move between shards or in a shard not loaded; 0 at rest"),
  mysqlStock: int().describe("tb_seckill_voucher.stock"),
  ordersInMysql: int().describe("the voucher's rows in tb_voucher_order, any status"),
  outboxPending: int()
    .nullable()
    .describe("the voucher's reservations waiting for MySQL, all shards; null when a shard's could not be counted"),
  shards: z.array(SeckillShard),
});
export const VoucherRow = z.object({
  id: int(),
  shopId: int(),
  title: z.string(),
  type: int().describe("0 normal, 1 seckill"),
  payValue: int().describe("cents"),
  actualValue: int().describe("cents"),
  stock: int().nullable().describe("seckill only: tb_seckill_voucher.stock"),
  beginMs: EpochMs.nullable(),
  endMs: EpochMs.nullable(),
  state: z.string().describe("a seckill's sale state, or a normal voucher's status"),
});
export const OrderView = z.object({
  id: z.string().describe("64-bit order id, as a decimal string"),
  userId: int(),
  voucherId: int(),
  status: z
    .enum([...(Object.keys(OrderStatus) as (keyof typeof OrderStatus)[]), "queued"])
    .describe("`queued`: reserved, in the outbox, not yet in MySQL"),
  createdAt: EpochMs,
  paidAt: EpochMs.nullable(),
});

// ---------------------------------------------------------------------------------------------
// Dead letters

export const DeadLetter = z.object({
  dlqId: z.string().describe("the entry's id: what re-drive and delete take"),
  messageId: z.string(),
  url: z.string().describe("destination, scrubbed"),
  method: z.string(),
  createdAt: EpochMs.describe("when the message was published"),
  maxRetries: int().nullable(),
  responseStatus: int().nullable().describe("HTTP status of the last failed delivery; null when it got no answer"),
  responseExcerpt: z.string().describe("the start of that answer's body, secrets scrubbed"),
  error: z.string().nullable().describe("why the last attempt got no answer, when known"),
  bodyExcerpt: z.string().describe("the start of the message body, secrets scrubbed"),
  labels: z.array(z.string()),
});
export const DeadLetterPage = z.object({
  messages: z.array(DeadLetter),
  cursor: z.string().nullable().describe("pass as `cursor` for the next page; null on the last"),
});
export const Redriven = z.object({ messageId: z.string().describe("the new message QStash published") });
export const BulkOutcome = z.object({
  done: int().describe("entries re-driven or deleted by this call"),
  messageIds: z.array(z.string()).describe("the new messages (re-drive)"),
  more: z.boolean().describe("entries were left (a call works through at most 1,000): call again"),
});

// The ties between each schema and its type (checked by `tsc`, nothing at run time).
type _ = [
  Assert<Describes<typeof Breakers, Record<DependencyName, GuardSnapshot>>>,
  Assert<Describes<typeof CacheReport, CacheReportType>>,
  Assert<Describes<typeof HotReport, HotReportType>>,
  Assert<Describes<typeof PipelineBacklog, PipelineBacklogType>>,
  Assert<Describes<typeof ReconcileReport, ReconcileReportType>>,
  Assert<Describes<typeof OpsSnapshot, OpsSnapshotType>>,
  Assert<Describes<typeof SaleRow, SaleRowType>>,
  Assert<Describes<typeof SeckillView, SeckillViewType>>,
  Assert<Describes<typeof VoucherRow, VoucherRowType>>,
  Assert<Describes<typeof OrderView, OrderViewType>>,
  Assert<Describes<typeof DeadLetterPage, DeadLetterPageType>>,
  Assert<Describes<typeof BulkOutcome, BulkOutcomeType>>,
];

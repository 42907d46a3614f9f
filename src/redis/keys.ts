/**
 * Every Redis key the app uses is built here. Classic hm-dianping names are kept where they exist
 * (architecture.md §4) so existing tooling and data keep working; keys that one Lua script touches
 * together share a `{hash tag}` so the scripts stay valid on a clustered Redis.
 */
import { hash53 } from "../util/hash.ts";

export const keys = {
  /** Login code for a phone (string, TTL = code lifetime). */
  loginCode: (phone: string) => `login:code:${phone}`,
  /**
   * Session hash `{id, nickName, icon}`; its TTL slides on every authenticated request. Named by
   * the session, never by the raw bearer token (key names end up in Upstash's error text, dumps
   * and logs): a signed token's record is `login:token:j:<jti>` — its random 128-bit id, useless
   * without the signature. A classic 32-hex token keeps its classic key (data the classic service
   * wrote; set SESSION_LEGACY_TOKENS=false once they have expired).
   */
  loginToken: (token: string) => `login:token:${sessionKeyPart(token)}`,
  /** Revocation stream: ZSET session id → revocation sequence number (lua/session-revoke.lua appends, lua/session-sync.lua reads). */
  loginRevoked: () => "login:revoked",
  /** The last revocation sequence number handed out (string, INCR). */
  loginRevokedSeq: () => "login:revoked:seq",
  /** GEO set of the shops of one type (member = shop id). */
  shopGeo: (typeId: number | string) => `shop:geo:${typeId}`,
  /**
   * L2 cache entry of a cache module: `cache:{<module>:b<n>}:<id>`. The tag is the module and one
   * of CACHE_BUCKETS buckets of the id (cacheBucket), so lua/cache-probe.lua and lua/cache-fill.lua
   * touch entry, lock and ceiling in one slot while a module's entries still spread over the slots.
   */
  cache: (module: string, id: string | number) => `cache:${cacheTag(module, id)}:${id}`,
  /**
   * Rebuild lock of one L2 entry (strategies mutex/logical): the lock.ts key of the entry's name,
   * `lock:cache:{<module>:b<n>}:<id>`. lua/cache-probe.lua takes it, lua/cache-fill.lua releases
   * it, lock.ts `tryLockKey` takes it when the probe could not.
   */
  cacheLock: (module: string, id: string | number) => `lock:cache:${cacheTag(module, id)}:${id}`,
  /**
   * A cache module's ceiling as seen by the ids of one bucket: the largest id its origin held
   * (every id of the bucket above it is absent; lua/cache-probe.lua). One copy per bucket, so the
   * probe reads it in its entry's slot; a new id makes only its own bucket's copy stale.
   */
  cacheCeiling: (module: string, id: string | number) => `cache-ceiling:${cacheTag(module, id)}`,
  /** Every bucket's copy of a module's ceiling (seeding and tests drop them all). */
  cacheCeilings: (module: string) => Array.from({ length: CACHE_BUCKETS }, (_, b) => `cache-ceiling:{${module}:b${b}}`),
  /** Cache counters summed across isolates, one hash per module. */
  cacheStats: (module: string) => `cache:stats:${module}`,
  /** Isolates that reported cache counters: hash isolateId → last report (epoch ms). */
  cacheIsolates: () => "cache:stats:isolates",
  /** Listing limit: HASH ip → requests allowed in epoch window n (src/http/listing-limit.ts); one hash tag, as one script reads two windows. */
  listingWindow: (n: number) => `{listing}:w${n}`,
  /** Cache write log: STREAM of `{k: "module:key"}` appended by every cache write, read by every isolate's flush (cache/hot.ts). */
  cacheWrites: () => "cache:writes",
  /** Hot-key report of one epoch minute: ZSET "module:key" → reads summed across isolates (TTL 10 min). */
  cacheHot: (minute: number) => `cache:hot:${minute}`,
  /** The same per isolate: ZSET "isolateId|module:key" → reads (TTL 10 min). */
  cacheHotBy: (minute: number) => `cache:hot:${minute}:by`,
  /**
   * Seckill keys. Everything the reservation script touches for a voucher carries the hash tag of
   * its *shop* (`{s<shopId>}`), not of the voucher: purchase rules span a shop's vouchers ("at
   * most K per user per day across the shop"), and a script's keys must share one slot. (The
   * classic `seckill:stock:{id}` / `seckill:order:{id}` had no tag and could not be clustered.)
   */
  seckill: {
    /** Hash {begin, end (epoch ms), initial, buckets, dailyLimit, rules, campaign}: its existence means "voucher exists". */
    meta: (shopId: number, voucherId: number) => `seckill:{s${shopId}}:v${voucherId}:meta`,
    /** Stock bucket `i` (0-based), integer string. One bucket = the classic single stock key. */
    stock: (shopId: number, voucherId: number, bucket: number) => `seckill:{s${shopId}}:v${voucherId}:stock:${bucket}`,
    /** Set of user ids holding a live reservation or order (one order per user). */
    buyers: (shopId: number, voucherId: number) => `seckill:{s${shopId}}:v${voucherId}:buyers`,
    /**
     * A sharded voucher's stock moves out of this shard (lua/seckill-move-out.lua): hash moveId →
     * "toShard:units:epochMs", deleted once the recipient applied it (services/seckill/moves.ts).
     */
    movesOut: (shopId: number, voucherId: number) => `seckill:{s${shopId}}:v${voucherId}:moves-out`,
    /** Move ids this shard applied (lua/seckill-move-in.lua): a repeated move-in gives nothing twice. */
    movesIn: (shopId: number, voucherId: number) => `seckill:{s${shopId}}:v${voucherId}:moves-in`,
    /**
     * Shard 0's credit guard of a sharded voucher (string): the id of the last deficit credit or
     * reload by reconcile. A credit applies only if the guard is still what its pass read
     * (lua/seckill-move-in.lua), so overlapping passes give one deficit back once.
     */
    creditGuard: (shopId: number, voucherId: number) => `seckill:{s${shopId}}:v${voucherId}:credit-guard`,
    /**
     * Fence of one reservation attempt whose reply was lost (lua/reserve-fence.lua): present =
     * settled as "not reserved"; reserve-stock refuses that order id from then on. Short-lived.
     */
    fence: (shopId: number, orderId: string) => `seckill:{s${shopId}}:fence:${orderId}`,
    /** Set of order ids whose stock went back to Redis (release is once per order). */
    released: (shopId: number, voucherId: number) => `seckill:{s${shopId}}:v${voucherId}:released`,
    /** Exact sliding-window attempt logs (ZSET member = order id, score = ms). */
    userLog: (shopId: number, voucherId: number, userId: number) => `seckill:{s${shopId}}:v${voucherId}:rl:u:${userId}`,
    ipLog: (shopId: number, voucherId: number, ip: string) => `seckill:{s${shopId}}:v${voucherId}:rl:ip:${ip}`,
    /** Per user per day (service zone, yyyyMMdd): SET of the user's order ids across the shop's seckill vouchers (lua/reserve-stock.lua). */
    daily: (shopId: number, userId: number, day: string) => `seckill:{s${shopId}}:daily:${day}:${userId}`,
    /**
     * Purchase-rule logs (src/services/seckill/rules.ts): ZSET orderId → reserved at (ms) of one
     * user's orders of the vouchers carrying a shop rule / naming the campaign. A campaign is per
     * shop (its log is under the shop's tag, so the reservation script stays cluster-valid).
     */
    ruleShop: (shopId: number, userId: number) => `seckill:{s${shopId}}:pr:shop:${userId}`,
    ruleCampaign: (shopId: number, campaign: string, userId: number) =>
      `seckill:{s${shopId}}:pr:c:${campaign}:${userId}`,
    /** Reservations not yet acknowledged by the MySQL writer: hash orderId → payload JSON. */
    outbox: (shopId: number) => `seckill:{s${shopId}}:outbox`,
    /** Same entries by reservation time (ZSET orderId → ms), for the sweep. */
    outboxDue: (shopId: number) => `seckill:{s${shopId}}:outbox:due`,
    /**
     * Where a reservation not yet in MySQL is: hash orderId → shopId, one key per hour of the
     * order id's own timestamp (so a lookup knows the key from the id alone), with a TTL. Written by
     * the reserving isolate, batched (src/services/seckill/pipeline.ts); not under a shop's hash
     * tag (it spans shops), so no script touches it together with an outbox.
     */
    orderIndex: (hour: number) => `seckill:oidx:${hour}`,
    /** Legacy registry set "shopId:voucherId" (the jobs now read the registry from MySQL). */
    active: () => "seckill:active",
    /** Last reconcile report (JSON). */
    reconcileReport: () => "seckill:reconcile:report",
    /**
     * Admission counters of one epoch second (lua/seckill-admission.lua): attempts admitted for a
     * voucher, and admitted attempts + leases across all vouchers. One `{adm}` tag: the script
     * touches both, and the total spans shops (so no shop tag).
     */
    admission: (voucherId: number, second: number) => `seckill:{adm}:v${voucherId}:${second}`,
    admissionTotal: (second: number) => `seckill:{adm}:all:${second}`,
    /**
     * Seckill attempts of one voucher by outcome, summed over isolates (src/services/sale-counters.ts;
     * lua/sale-counts.lua adds each isolate's deltas): HASH outcome → attempts, TTL renewed by every
     * flush. One `{counts}` tag: a flush touches every voucher it counted in one script.
     */
    counts: (voucherId: number) => `seckill:{counts}:v${voucherId}`,
  },
  /** Order id blocks: the last block number handed out (lua/id-block.lua; never expires). */
  idBlock: () => "idgen:block",
  /** Idempotency marks of processed callbacks (SET NX with TTL). */
  processed: (kind: string, id: string) => `processed:${kind}:${id}`,
  /** Mutex / job lock. */
  lock: (name: string) => `lock:${name}`,
  /**
   * Who liked a note: ZSET member = user id, score = like time (epoch ms), so ZRANGE 0 4 gives the
   * first likers in like order. The id is a hash tag: the like script also touches `blogLikedVersion`.
   */
  blogLiked: (blogId: number) => `blog:liked:{${blogId}}`,
  /** Last version handed out for the note's like count (string, integer; see lua/blog-like-toggle.lua). */
  blogLikedVersion: (blogId: number) => `blog:liked:{${blogId}}:version`,
  /** Users `uid` follows (SET of user ids), mirrored from tb_follow for SINTER. */
  follows: (userId: number) => `follows:${userId}`,
  /** Inbox of notes pushed by followed authors: ZSET member = blog id, score = note time (epoch ms). */
  feed: (userId: number) => `feed:${userId}`,
  /** Sign-in bitmap of one user for one month (`yyyyMM`, service zone); bit = day of month − 1. */
  sign: (userId: number, yyyyMM: string) => `sign:${userId}:${yyyyMM}`,
  /** HyperLogLog of the day's visitors (`yyyyMMdd`, service zone). */
  uv: (yyyyMMdd: string) => `uv:${yyyyMMdd}`,
  /**
   * One Idempotency-Key's record (string; lua/idempotency-claim.lua): `scopeHash` is the SHA-256
   * (hex) of caller, method, route pattern and the client's key, so the key's length is fixed
   * whatever the client sends and no caller's key or credential appears in it.
   */
  idempotency: (callerHash: string, scopeHash: string) => `idem:{${callerHash}}:${scopeHash}`,
  /** New Idempotency-Keys one caller claimed in one clock hour (`hour` = epoch hours), beside its records (same hash tag). */
  idempotencyQuota: (callerHash: string, hour: number) => `idem:{${callerHash}}:n:${hour}`,
  /** Image bytes a user reserved for uploads on one service day (`yyyyMMdd`; lua/upload-quota.lua). */
  uploadQuota: (userId: number, yyyyMMdd: string) => `upload:quota:${yyyyMMdd}:${userId}`,
  /** Prefixes of the per-user token buckets (@upstash/ratelimit appends `:<userId>`). */
  uploadBucket: () => "rl:upload",
  noteBucket: () => "rl:note",
  /** A console session signed out before it expired (string, TTL = the rest of its life). */
  consoleRevoked: (nonce: string) => `console:revoked:${nonce}`,
  /** Console sessions issued before this epoch ms are void ("revoke all console sessions"). */
  consoleEpoch: () => "console:epoch",
  /** Like/follow toggle token buckets (@upstash/ratelimit prefix). */
  toggleBucket: () => "rl:toggle",
} as const;

/** Hash-tag buckets of a cache module (see keys.cache): the slots one module's entries spread over. */
export const CACHE_BUCKETS = 16;

/** The bucket (0 ≤ b < CACHE_BUCKETS) of a cache key: its digest, so integer and text keys spread alike. */
export function cacheBucket(id: string | number): number {
  return hash53(String(id)) % CACHE_BUCKETS;
}

function cacheTag(module: string, id: string | number): string {
  return `{${module}:b${cacheBucket(id)}}`;
}

/** `j:<jti>` of a signed token (its payload decoded, no signature check: callers verified it), the
 * classic token itself for 32-hex ones, else a digest (never the token). */
function sessionKeyPart(token: string): string {
  if (/^[0-9a-f]{32}$/.test(token)) return token;
  const first = token.indexOf(".");
  const last = token.lastIndexOf(".");
  if (first > 0 && last > first) {
    try {
      const b64 = token
        .slice(first + 1, last)
        .replace(/-/g, "+")
        .replace(/_/g, "/");
      const jti = (JSON.parse(atob(b64 + "===".slice((b64.length + 3) % 4))) as { jti?: unknown }).jti;
      if (typeof jti === "string" && /^[A-Za-z0-9_-]{16,64}$/.test(jti)) return `j:${jti}`;
    } catch {
      // not a token of ours: fall through
    }
  }
  return `x:${hash53(token).toString(36)}`;
}

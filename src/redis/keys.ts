/**
 * Every Redis key the app uses is built here. Classic hm-dianping names are kept where they exist
 * (architecture.md §4) so existing tooling and data keep working; keys that one Lua script touches
 * together share a `{hash tag}` so the scripts stay valid on a clustered Redis.
 */
export const keys = {
  /** Login code for a phone (string, TTL = code lifetime). */
  loginCode: (phone: string) => `login:code:${phone}`,
  /** Session hash `{id, nickName, icon}`; its TTL slides on every authenticated request. */
  loginToken: (token: string) => `login:token:${token}`,
  /** GEO set of the shops of one type (member = shop id). */
  shopGeo: (typeId: number | string) => `shop:geo:${typeId}`,
  /** L2 cache entry of a cache module (`cache:shop:{id}` is the classic name). */
  cache: (module: string, id: string | number) => `cache:${module}:${id}`,
  /** Cache counters summed across isolates, one hash per module. */
  cacheStats: (module: string) => `cache:stats:${module}`,
  /** Isolates that reported cache counters: hash isolateId → last report (epoch ms). */
  cacheIsolates: () => "cache:stats:isolates",
  /** Seckill stock (string, integer) and sale window (hash {begin, end}, epoch ms); one hash tag per voucher. */
  seckillStock: (voucherId: number | string) => `seckill:{${voucherId}}:stock`,
  seckillWindow: (voucherId: number | string) => `seckill:{${voucherId}}:window`,
  /** Mutex / job lock. */
  lock: (name: string) => `lock:${name}`,
} as const;

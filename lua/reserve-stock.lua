--[[
  reserve-stock.lua — one seckill reservation, atomically, in one round trip.

  Checks, in order: the per-user and per-IP attempt limits (exact sliding-window logs), that the
  voucher exists, its sale window, one order per user, the per-user daily limit across the shop,
  the voucher's purchase-limit rules, the stock; then takes one unit, records the buyer, records
  the order in each rule log and writes the reservation to the outbox. Either all of that happens
  or none of it (apart from the attempt logs, which record attempts): every check runs before the
  first write, so a refused attempt leaves no trace in stock, buyers, counters or rule logs.

  Purchase-limit rules (src/services/seckill/rules.ts): meta `rules` is "scope:K:N,…" (canonical
  order, shop first), and the caller passes one log per rule in that order. Rule i refuses when
  its log holds K orders reserved in (now − N days, now]. A voucher without rules runs no extra
  command (the field comes with the same HMGET).

  All keys carry the shop's hash tag (see src/redis/keys.ts), so the script is valid on a cluster.

  KEYS[1]   meta hash {begin, end (epoch ms), dailyLimit, rules}
  KEYS[2]   buyers set (user ids)
  KEYS[3]   outbox hash (orderId -> payload JSON)
  KEYS[4]   outbox-due zset (orderId -> reserved at, ms)
  KEYS[5]   per-user attempt log zset
  KEYS[6]   per-IP attempt log zset
  KEYS[7]   per-user daily set across the shop: the user's order ids of the day at this shop (a
            release takes its own id out, so no repeat of a release can give quota back twice)
  KEYS[8]   this attempt's fence (lua/reserve-fence.lua): present = the caller gave up on this order
            id and has told the buyer nothing was reserved, so a late execution must not reserve
  KEYS[9 .. 8+r]  the user's rule logs (ZSET orderId -> reserved at, ms), one per meta rule, in order
  KEYS[9+r ..]    stock buckets: the buyer's home bucket first, then the others in probe order

  ARGV[1]   user id
  ARGV[2]   order id (decimal string; unique per attempt, so also the attempt-log member: a retry of
            the same attempt after a refill passes the same id and counts once)
  ARGV[3]   now, epoch ms
  ARGV[4]   per-user attempts allowed per window (0 = no limit)
  ARGV[5]   per-user window, ms
  ARGV[6]   per-IP attempts allowed per window (0 = no limit)
  ARGV[7]   per-IP window, ms
  ARGV[8]   outbox payload (JSON)
  ARGV[9]   daily counter TTL, seconds
  ARGV[10]  the caller's rules, encoded like meta `rules` (absent = none); must equal meta's, so
            the rule logs passed are the ones the meta's rules mean (r = their number)
  ARGV[11]  rule-log horizon, ms (PURCHASE_RULE_MAX_DAYS): older entries count for no rule and are trimmed

  Returns {code, a, b}:
    {0, bucket, left}    reserved; bucket = index into the bucket list (1 = home), left = its stock
    {1, 0, 0}            NOT_FOUND
    {2, begin, 0}        NOT_STARTED
    {3, end, 0}          ENDED
    {4, 0, 0}            SOLD_OUT (every bucket empty: a buyer never sees sold out while any has stock)
    {5, 0, 0}            DUPLICATE_ORDER
    {6, retryAfterMs, w} RATE_LIMITED, w = 1 user limit, 2 IP limit
    {7, limit, 0}        LIMIT_REACHED (daily limit across the shop)
    {7, limit, i}        LIMIT_REACHED (purchase rule i, 1-based in meta order)
    {8, 0, 0}            FENCED: a late execution of an attempt its caller already settled (nobody reads it)
  A meta whose rules differ from ARGV[10] is an error reply: a caller with another configuration
  (a manual edit of the rules) is refused rather than checked against the wrong logs.
]]
local metaKey, buyersKey, outboxKey, dueKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local userLogKey, ipLogKey, dailyKey, fenceKey = KEYS[5], KEYS[6], KEYS[7], KEYS[8]

local userId = ARGV[1]
local orderId = ARGV[2]
local now = tonumber(ARGV[3])
local userLimit, userWindow = tonumber(ARGV[4]), tonumber(ARGV[5])
local ipLimit, ipWindow = tonumber(ARGV[6]), tonumber(ARGV[7])
local payload = ARGV[8]
local dailyTtl = tonumber(ARGV[9])
local callerRules = ARGV[10] or ""

-- Sliding-window log: drop entries older than the window, then compare the count with the limit.
-- Returns ms until the oldest entry leaves the window when full, else 0. An order id already in
-- the log is this attempt again (the retry after a refill reuses it): counted once, never refused
-- by its own entry.
local function windowFull(key, limit, window)
  if limit <= 0 then return 0 end
  redis.call("ZREMRANGEBYSCORE", key, "-inf", now - window)
  if redis.call("ZSCORE", key, orderId) then return 0 end
  if redis.call("ZCARD", key) < limit then return 0 end
  local oldest = redis.call("ZRANGE", key, 0, 0, "WITHSCORES")
  return math.max(1, tonumber(oldest[2]) + window - now)
end

-- Fenced first: an attempt its caller settled as "not reserved" leaves no trace at all.
if redis.call("EXISTS", fenceKey) == 1 then return {8, 0, 0} end

-- Both limits are checked before either records, so a refused attempt costs no quota elsewhere.
local wait = windowFull(userLogKey, userLimit, userWindow)
if wait > 0 then return {6, wait, 1} end
wait = windowFull(ipLogKey, ipLimit, ipWindow)
if wait > 0 then return {6, wait, 2} end
-- NX: a retried attempt keeps its first entry's time (its window does not restart).
if userLimit > 0 then
  redis.call("ZADD", userLogKey, "NX", now, orderId)
  redis.call("PEXPIRE", userLogKey, userWindow)
end
if ipLimit > 0 then
  redis.call("ZADD", ipLogKey, "NX", now, orderId)
  redis.call("PEXPIRE", ipLogKey, ipWindow)
end

local meta = redis.call("HMGET", metaKey, "begin", "end", "dailyLimit", "rules")
if not meta[1] then return {1, 0, 0} end
-- rules[i] = {K, N in ms}; its log is KEYS[8 + i].
local metaRules = meta[4] or ""
if metaRules ~= callerRules then
  return redis.error_reply("reserve-stock: the voucher's purchase rules are '" .. metaRules .. "', the caller's '" .. callerRules .. "'")
end
local rules = {}
for _, limit, days in string.gmatch(metaRules, "(%a+):(%d+):(%d+)") do
  rules[#rules + 1] = {tonumber(limit), tonumber(days) * 86400000}
end
local nRules = #rules
local beginMs, endMs, dailyLimit = tonumber(meta[1]), tonumber(meta[2]), tonumber(meta[3] or "0")
if now < beginMs then return {2, beginMs, 0} end
if now >= endMs then return {3, endMs, 0} end

if redis.call("SISMEMBER", buyersKey, userId) == 1 then return {5, 0, 0} end

-- Keys written before 2026-12-01 are integer counters (they expire within dailyTtl): counted and
-- incremented as such. Remove the "legacy" branches after 2026-12-08.
local dailyLegacy = false
if dailyLimit > 0 then
  dailyLegacy = redis.call("TYPE", dailyKey).ok == "string"
  local used
  if dailyLegacy then used = tonumber(redis.call("GET", dailyKey) or "0") else used = redis.call("SCARD", dailyKey) end
  if used >= dailyLimit then return {7, dailyLimit, 0} end
end

-- Rolling windows: orders reserved after now − N count (one reserved exactly N days ago no longer does).
for i = 1, nRules do
  if redis.call("ZCOUNT", KEYS[8 + i], "(" .. (now - rules[i][2]), "+inf") >= rules[i][1] then
    return {7, rules[i][1], i}
  end
end

-- Home bucket first; if it is empty, probe the others so stock left anywhere is sold.
local chosen, left = 0, 0
for i = 9 + nRules, #KEYS do
  local stock = tonumber(redis.call("GET", KEYS[i]) or "0")
  if stock > 0 then
    left = redis.call("DECR", KEYS[i])
    chosen = i - 8 - nRules
    break
  end
end
if chosen == 0 then return {4, 0, 0} end

redis.call("SADD", buyersKey, userId)
redis.call("HSET", outboxKey, orderId, payload)
redis.call("ZADD", dueKey, now, orderId)
if dailyLimit > 0 then
  if dailyLegacy then redis.call("INCR", dailyKey) else redis.call("SADD", dailyKey, orderId) end
  redis.call("EXPIRE", dailyKey, dailyTtl)
end
-- A log is shared by vouchers whose rules may have different N: trim only what no rule can count
-- (older than the horizon), and only ever lengthen the TTL, so it covers the longest window of any
-- entry (TTL is -1/-2 for no TTL / no key, both below any window).
if nRules > 0 then
  local horizon = tonumber(ARGV[11])
  for i = 1, nRules do
    local key, ttl = KEYS[8 + i], math.ceil(rules[i][2] / 1000)
    redis.call("ZREMRANGEBYSCORE", key, "-inf", now - horizon)
    redis.call("ZADD", key, now, orderId)
    if redis.call("TTL", key) < ttl then redis.call("EXPIRE", key, ttl) end
  end
end
return {0, chosen, left}

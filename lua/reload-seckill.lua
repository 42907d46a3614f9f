--[[
  reload-seckill.lua — reconcile repair: load a voucher whose Redis data is missing, from MySQL.

  Used when the meta hash is absent: the creation-time load failed, or Redis lost the keys
  (flush, failover without persistence, a manual DEL). While meta is absent reserve-stock.lua
  answers NOT_FOUND before touching anything else, so no reservation can interleave; closes and
  their releases can, and are handled by the released set:

  1. Every order MySQL said was not active (cancelled, refunding, refunded) is marked released:
     the state rebuilt here already leaves its unit in stock and its user out of the buyers, so a
     release still in flight (or a redelivered close) must not INCR/SREM again. Its outbox entry,
     if any, is dropped, as release-stock.lua would.
  2. Every (order, user) that held a unit when read (active in MySQL, or pending in the outbox) is
     re-added as a buyer unless its order is released by now (a close that won the race already
     put the unit back; see reconcile-buyers.lua).
  3. stock = initial − |buyers| (= initial − active − pending), spread evenly over the buckets
     (the first ones take the remainder), which also overwrites any INCR a release made on a missing bucket.
  4. meta is written last: from here on the sale is open again.

  All keys carry the shop's hash tag (see src/redis/keys.ts), so the script is valid on a cluster.

  KEYS[1]    meta hash {begin, end (epoch ms), initial, buckets, dailyLimit, rules, campaign}
  KEYS[2]    released set (order ids)
  KEYS[3]    buyers set (user ids)
  KEYS[4]    outbox hash (orderId -> payload JSON) of the voucher's shop
  KEYS[5]    outbox-due zset of the shop
  KEYS[6..]  stock buckets, bucket 0 first (all of them)
  ARGV[1]    begin, epoch ms
  ARGV[2]    end, epoch ms
  ARGV[3]    initial stock, units
  ARGV[4]    daily limit across the shop (0 = none)
  ARGV[5]    purchase-limit rules, "scope:K:N,…" ("" = none; see reserve-stock.lua)
  ARGV[6]    campaign id ("" = none; informational, the campaign is in the rule logs' key names)
  ARGV[7]    n = number of settled (not active) order ids that follow
  ARGV[8 .. 7+n]  settled order ids
  ARGV[8+n ..]    pairs orderId, userId that held a unit when read

  Returns {loaded, stock, buyers}: loaded 0 when meta exists (someone loaded it meanwhile; nothing
  changed), else 1 with the stock (units, summed) and |buyers| written.
]]
local metaKey, releasedKey, buyersKey, outboxKey, dueKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local beginMs, endMs, initial, dailyLimit = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local rules, campaign = ARGV[5], ARGV[6]
local settled = tonumber(ARGV[7])
local nBuckets = #KEYS - 5

if redis.call("EXISTS", metaKey) == 1 then
  return { 0, 0, 0 }
end

for i = 8, 7 + settled do
  if redis.call("SADD", releasedKey, ARGV[i]) == 1 then
    redis.call("HDEL", outboxKey, ARGV[i])
    redis.call("ZREM", dueKey, ARGV[i])
  end
end

for i = 8 + settled, #ARGV - 1, 2 do
  if redis.call("SISMEMBER", releasedKey, ARGV[i]) == 0 then
    redis.call("SADD", buyersKey, ARGV[i + 1])
  end
end

local buyers = redis.call("SCARD", buyersKey)
local target = math.max(0, initial - buyers)
local base, extra = math.floor(target / nBuckets), target % nBuckets
for i = 6, #KEYS do
  local share = base
  if (i - 6) < extra then share = share + 1 end
  redis.call("SET", KEYS[i], share)
end

redis.call("HSET", metaKey, "begin", beginMs, "end", endMs, "initial", initial, "buckets", nBuckets, "dailyLimit", dailyLimit, "rules", rules, "campaign", campaign)
return { 1, target, buyers }

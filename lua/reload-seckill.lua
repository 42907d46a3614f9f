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
  2b. With purchase-limit rules, each such order not released is also put back in its user's rule
     logs (ZADD NX, scored with its reservation time), so a Redis that lost the logs does not
     hand every user a fresh quota; the released check is the same atomic step as above.
  3. stock = initial − |buyers| (= initial − active − pending), spread evenly over the buckets
     (the first ones take the remainder), which also overwrites any INCR a release made on a missing bucket.
  4. meta is written last: from here on the sale is open again.

  All keys carry the shop's hash tag (see src/redis/keys.ts), so the script is valid on a cluster.

  KEYS[1]    meta hash {begin, end (epoch ms), initial, buckets, dailyLimit, rules, campaign}
  KEYS[2]    released set (order ids)
  KEYS[3]    buyers set (user ids)
  KEYS[4]    outbox hash (orderId -> payload JSON) of the voucher's shop
  KEYS[5]    outbox-due zset of the shop
  KEYS[6 .. 5+b]  stock buckets, bucket 0 first (all of them)
  KEYS[6+b ..]    rule logs of the holders below: r per holder (r = number of rules), in holder
                  then rule order (none without rules)
  ARGV[1]    begin, epoch ms
  ARGV[2]    end, epoch ms
  ARGV[3]    initial stock, units
  ARGV[4]    daily limit across the shop (0 = none)
  ARGV[5]    purchase-limit rules, "scope:K:N,…" ("" = none; see reserve-stock.lua)
  ARGV[6]    campaign id ("" = none; informational, the campaign is in the rule logs' key names)
  ARGV[7]    b = number of stock buckets
  ARGV[8]    n = number of settled (not active) order ids that follow
  ARGV[9 .. 8+n]  settled order ids
  ARGV[9+n ..]    triples orderId, userId, reservedAt (epoch ms) that held a unit when read

  Returns {loaded, stock, buyers}: loaded 0 when meta exists (someone loaded it meanwhile; nothing
  changed), else 1 with the stock (units, summed) and |buyers| written.
]]
local metaKey, releasedKey, buyersKey, outboxKey, dueKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local beginMs, endMs, initial, dailyLimit = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local rules, campaign = ARGV[5], ARGV[6]
local nBuckets = tonumber(ARGV[7])
local settled = tonumber(ARGV[8])
-- Rule windows in seconds (the logs' TTL), in rule order.
local ruleTtl = {}
for _, _, days in string.gmatch(rules, "(%a+):(%d+):(%d+)") do ruleTtl[#ruleTtl + 1] = tonumber(days) * 86400 end
local nRules = #ruleTtl
local nHolders = (#ARGV - 8 - settled) / 3
if nBuckets < 1 or nHolders % 1 ~= 0 or #KEYS ~= 5 + nBuckets + nRules * nHolders then
  return redis.error_reply("reload-seckill: keys do not match the buckets, rules and holders")
end

if redis.call("EXISTS", metaKey) == 1 then
  return { 0, 0, 0 }
end

for i = 9, 8 + settled do
  if redis.call("SADD", releasedKey, ARGV[i]) == 1 then
    redis.call("HDEL", outboxKey, ARGV[i])
    redis.call("ZREM", dueKey, ARGV[i])
  end
end

for h = 0, nHolders - 1 do
  local i = 9 + settled + 3 * h
  if redis.call("SISMEMBER", releasedKey, ARGV[i]) == 0 then
    redis.call("SADD", buyersKey, ARGV[i + 1])
    for r = 1, nRules do
      local log = KEYS[5 + nBuckets + nRules * h + r]
      redis.call("ZADD", log, "NX", ARGV[i + 2], ARGV[i])
      if redis.call("TTL", log) < ruleTtl[r] then redis.call("EXPIRE", log, ruleTtl[r]) end
    end
  end
end

local buyers = redis.call("SCARD", buyersKey)
local target = math.max(0, initial - buyers)
local base, extra = math.floor(target / nBuckets), target % nBuckets
for i = 6, 5 + nBuckets do
  local share = base
  if (i - 6) < extra then share = share + 1 end
  redis.call("SET", KEYS[i], share)
end

redis.call("HSET", metaKey, "begin", beginMs, "end", endMs, "initial", initial, "buckets", nBuckets, "dailyLimit", dailyLimit, "rules", rules, "campaign", campaign)
return { 1, target, buyers }

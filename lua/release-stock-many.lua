--[[
  release-stock-many.lua — give a group of cancelled orders' units of ONE voucher back to Redis,
  exactly once per order (release-stock.lua for many orders in one command).

  Called after MySQL recorded the cancellations. The released set makes each release idempotent:
  redelivered close messages, a cron pass racing the callback, or a retry after a crash all end
  with one release per order.

  KEYS[1]            released set (order ids)
  KEYS[2]            buyers set
  KEYS[3]            outbox hash
  KEYS[4]            outbox-due zset
  then one block of s keys per order i (i = 1..n; s = (#KEYS − 4) / n, the same for every order
  since they are of one voucher):
    order i's per-user daily set (of its reservation day; order ids, see reserve-stock.lua)
    order i's stock bucket to credit
    order i's user's purchase-rule logs (s − 2 of them, none for a voucher without rules)
  ARGV[2i-1]         order i's id
  ARGV[2i]           order i's user id

  The order leaves its rule logs (ZREM) in the same once-only step, so a cancelled order gives
  its purchase quota back exactly once (ZREM by order id would be idempotent anyway).

  Returns the number of orders released now (the others had been released before).
]]
local releasedKey, buyersKey, outboxKey, dueKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
-- The order leaves its user's daily set (an integer counter in keys written before 2026-12-01:
-- decremented, never below 0; remove that branch after 2026-12-08, when the last one expired).
local function giveBackDaily(key, orderId)
  if redis.call("TYPE", key).ok == "string" then
    if tonumber(redis.call("GET", key) or "0") > 0 then redis.call("DECR", key) end
  else
    redis.call("SREM", key, orderId)
  end
end
local n = #ARGV / 2
local stride = (#KEYS - 4) / n
if n == 0 then return 0 end
if stride < 2 or stride % 1 ~= 0 then return redis.error_reply("release-stock-many: keys do not match the orders") end
local released = 0
for i = 1, n do
  local orderId, userId = ARGV[2 * i - 1], ARGV[2 * i]
  local base = 4 + stride * (i - 1)
  local dailyKey, bucketKey = KEYS[base + 1], KEYS[base + 2]
  if redis.call("SADD", releasedKey, orderId) == 1 then
    redis.call("INCR", bucketKey)
    redis.call("SREM", buyersKey, userId)
    redis.call("HDEL", outboxKey, orderId)
    redis.call("ZREM", dueKey, orderId)
    giveBackDaily(dailyKey, orderId)
    for k = base + 3, base + stride do redis.call("ZREM", KEYS[k], orderId) end
    released = released + 1
  end
end
return released

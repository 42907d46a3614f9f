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
  KEYS[4+2i-1]       order i's per-user daily counter (of its reservation day)    (i = 1..n)
  KEYS[4+2i]         order i's stock bucket to credit
  ARGV[2i-1]         order i's id
  ARGV[2i]           order i's user id

  Returns the number of orders released now (the others had been released before).
]]
local releasedKey, buyersKey, outboxKey, dueKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local n = #ARGV / 2
local released = 0
for i = 1, n do
  local orderId, userId = ARGV[2 * i - 1], ARGV[2 * i]
  local dailyKey, bucketKey = KEYS[4 + 2 * i - 1], KEYS[4 + 2 * i]
  if redis.call("SADD", releasedKey, orderId) == 1 then
    redis.call("INCR", bucketKey)
    redis.call("SREM", buyersKey, userId)
    redis.call("HDEL", outboxKey, orderId)
    redis.call("ZREM", dueKey, orderId)
    if tonumber(redis.call("GET", dailyKey) or "0") > 0 then redis.call("DECR", dailyKey) end
    released = released + 1
  end
end
return released

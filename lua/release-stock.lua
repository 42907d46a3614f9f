--[[
  release-stock.lua — give a cancelled order's unit back to Redis, exactly once per order.

  Called after MySQL recorded the cancellation (or when a reservation never reached MySQL and is
  closed from the outbox). The released set makes it idempotent: redelivered close messages, a
  cron pass racing the callback, or a retry after a crash all end with one release.

  KEYS[1]  released set (order ids)
  KEYS[2]  buyers set
  KEYS[3]  outbox hash
  KEYS[4]  outbox-due zset
  KEYS[5]  per-user daily set of the reservation's day (order ids; see reserve-stock.lua)
  KEYS[6]  stock bucket to credit
  KEYS[7..] the user's purchase-rule logs of the voucher (none without rules): the order leaves
           them, giving its quota back, in the same once-only step
  ARGV[1]  order id
  ARGV[2]  user id

  Returns 1 when released now, 0 when it had been released before.
]]
local releasedKey, buyersKey, outboxKey, dueKey, dailyKey, bucketKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local orderId, userId = ARGV[1], ARGV[2]
-- The order leaves its user's daily set (an integer counter in keys written before 2026-12-01:
-- decremented, never below 0; remove that branch after 2026-12-08, when the last one expired).
local function giveBackDaily(key, orderId)
  if redis.call("TYPE", key).ok == "string" then
    if tonumber(redis.call("GET", key) or "0") > 0 then redis.call("DECR", key) end
  else
    redis.call("SREM", key, orderId)
  end
end

if redis.call("SADD", releasedKey, orderId) == 0 then return 0 end
redis.call("INCR", bucketKey)
redis.call("SREM", buyersKey, userId)
redis.call("HDEL", outboxKey, orderId)
redis.call("ZREM", dueKey, orderId)
giveBackDaily(dailyKey, orderId)
for i = 7, #KEYS do redis.call("ZREM", KEYS[i], orderId) end
return 1

--[[
  release-stock.lua — give a cancelled order's unit back to Redis, exactly once per order.

  Called after MySQL recorded the cancellation (or when a reservation never reached MySQL and is
  closed from the outbox). The released set makes it idempotent: redelivered close messages, a
  cron pass racing the callback, or a retry after a crash all end with one release.

  KEYS[1]  released set (order ids)
  KEYS[2]  buyers set
  KEYS[3]  outbox hash
  KEYS[4]  outbox-due zset
  KEYS[5]  per-user daily counter of the reservation's day
  KEYS[6]  stock bucket to credit
  KEYS[7..] the user's purchase-rule logs of the voucher (none without rules): the order leaves
           them, giving its quota back, in the same once-only step
  ARGV[1]  order id
  ARGV[2]  user id

  Returns 1 when released now, 0 when it had been released before.
]]
local releasedKey, buyersKey, outboxKey, dueKey, dailyKey, bucketKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local orderId, userId = ARGV[1], ARGV[2]

if redis.call("SADD", releasedKey, orderId) == 0 then return 0 end
redis.call("INCR", bucketKey)
redis.call("SREM", buyersKey, userId)
redis.call("HDEL", outboxKey, orderId)
redis.call("ZREM", dueKey, orderId)
if tonumber(redis.call("GET", dailyKey) or "0") > 0 then redis.call("DECR", dailyKey) end
for i = 7, #KEYS do redis.call("ZREM", KEYS[i], orderId) end
return 1

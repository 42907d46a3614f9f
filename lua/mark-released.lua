--[[
  mark-released.lua — reconcile: record a cancelled order as released whose buyer holds no unit
  for it (its release was lost, or the buyers set lost the user), and give back its quotas, once.

  Once per order: everything happens only if this call adds the order to the released set, so a
  repeated pass (or a release racing it) gives nothing back twice. Quotas: the per-user daily
  counter of the order's reservation day (when the voucher has a daily limit — never below 0) and
  the order's entries in its user's purchase-rule logs. Stock and buyers are left alone: the unit is
  not held in Redis; a stock/buyers mismatch is real drift that reconcile repairs separately.

  All keys carry the shop's hash tag (see src/redis/keys.ts).

  KEYS[1]    released set (order ids whose unit went back to Redis)
  KEYS[2]    per-user daily counter of the reservation's day (integer string)
  KEYS[3..]  the user's purchase-rule logs (ZSET orderId -> reserved at)
  ARGV[1]    order id
  ARGV[2]    "1" if the voucher has a daily limit (the counter was incremented), else "0"

  Returns 1 when this call marked the order, 0 when it was released already.
]]
local releasedKey, dailyKey = KEYS[1], KEYS[2]
local orderId, counted = ARGV[1], ARGV[2] == "1"

if redis.call("SADD", releasedKey, orderId) == 0 then return 0 end
if counted and tonumber(redis.call("GET", dailyKey) or "0") > 0 then redis.call("DECR", dailyKey) end
for i = 3, #KEYS do redis.call("ZREM", KEYS[i], orderId) end
return 1

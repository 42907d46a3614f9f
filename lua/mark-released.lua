--[[
  mark-released.lua — reconcile: record a cancelled order as released whose buyer holds no unit
  for it (its release was lost, or the buyers set lost the user), and give back its quotas, once.

  Once per order: everything happens only if this call adds the order to the released set, so a
  repeated pass (or a release racing it) gives nothing back twice. Quotas: the order's entry in
  the per-user daily set of its reservation day (when the voucher has a daily limit) and
  the order's entries in its user's purchase-rule logs. Stock and buyers are left alone: the unit is
  not held in Redis; a stock/buyers mismatch is real drift that reconcile repairs separately.

  All keys carry the shop's hash tag (see src/redis/keys.ts).

  KEYS[1]    released set (order ids whose unit went back to Redis)
  KEYS[2]    per-user daily set of the reservation's day (order ids; see reserve-stock.lua)
  KEYS[3..]  the user's purchase-rule logs (ZSET orderId -> reserved at)
  ARGV[1]    order id
  ARGV[2]    "1" if the voucher has a daily limit (the order was counted), else "0"

  Returns 1 when this call marked the order, 0 when it was released already.
]]
local releasedKey, dailyKey = KEYS[1], KEYS[2]
local orderId, counted = ARGV[1], ARGV[2] == "1"
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
if counted then giveBackDaily(dailyKey, orderId) end
for i = 3, #KEYS do redis.call("ZREM", KEYS[i], orderId) end
return 1

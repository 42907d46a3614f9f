--[[
  reconcile-buyers.lua — reconcile repair: put back buyers Redis lost, never one whose unit went back.

  Reconcile reads MySQL (active orders) and the outbox (pending reservations) first, then calls
  this. Between that read and this script a close may have cancelled one of those orders and
  released it (release-stock.lua: SADD released + INCR bucket + SREM buyer, in one step). Re-adding
  that buyer would leave a user holding nothing yet blocked by one-order-per-user, and the stock
  reset that follows would then take a unit away for good. The released set is written atomically
  with the SREM, so checking it here, in the same atomic step as the SADD, decides exactly:
  an order not in the released set still holds its unit (pending, active, or cancelled with the
  release still to come, which will then SREM the buyer and INCR the bucket itself).

  It also reads sum(buckets) and |buyers| in the same atomic step, so the caller's check of the
  invariant sum(buckets) + |buyers| = initial never mixes two moments of a live sale.

  All keys carry the shop's hash tag (see src/redis/keys.ts), so the script is valid on a cluster.

  KEYS[1]    released set (order ids whose unit went back to Redis)
  KEYS[2]    buyers set (user ids)
  KEYS[3..]  stock buckets (all of them), integer strings
  ARGV       pairs: orderId1, userId1, orderId2, userId2, … (orders that held a unit when read)

  Returns {readded, stock, buyers}:
    readded  buyers added back by this call
    stock    sum of the buckets, units, after the repair
    buyers   SCARD of the buyers set after the repair
]]
local releasedKey, buyersKey = KEYS[1], KEYS[2]

local readded = 0
for i = 1, #ARGV - 1, 2 do
  local orderId, userId = ARGV[i], ARGV[i + 1]
  if redis.call("SISMEMBER", releasedKey, orderId) == 0 and redis.call("SADD", buyersKey, userId) == 1 then
    readded = readded + 1
  end
end

local stock = 0
for i = 3, #KEYS do stock = stock + tonumber(redis.call("GET", KEYS[i]) or "0") end
return { readded, stock, redis.call("SCARD", buyersKey) }

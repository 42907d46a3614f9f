--[[
  reserve-fence.lua — settle a reservation whose reply was lost, so the answer given is the truth.

  A reserve-stock call that timed out, or whose connection broke, may have run, may still run
  later (Upstash can execute a request after the client gave up), or may never run. This script,
  sent by the same request within its budget, tells which — and makes "never" final:
    - our order id is in the outbox: the reservation happened (answer the order id);
    - the buyer is in the buyers set but our id is not in the outbox: the buyer holds a unit from
      an earlier attempt, or ours was already written to MySQL (answer DUPLICATE_ORDER + lookup);
    - neither: it has not run. The fence is set, and reserve-stock refuses any later execution
      of this order id (it checks the fence first), so "nothing reserved" stays true.
  The fence lives FENCE_TTL_MS — far beyond any delay a request could have in flight.

  All keys carry the shop's hash tag.

  KEYS[1]  outbox hash (orderId -> payload JSON)
  KEYS[2]  buyers set (user ids)
  KEYS[3]  the attempt's fence key (the one reserve-stock got as KEYS[8])
  ARGV[1]  order id of the lost attempt
  ARGV[2]  user id
  ARGV[3]  fence time to live, ms

  Returns 1 reserved (ours), 2 already a buyer (not ours in the outbox), 0 fenced (never reserved).
]]
local outboxKey, buyersKey, fenceKey = KEYS[1], KEYS[2], KEYS[3]
local orderId, userId, ttlMs = ARGV[1], ARGV[2], tonumber(ARGV[3])

if redis.call("HEXISTS", outboxKey, orderId) == 1 then return 1 end
if redis.call("SISMEMBER", buyersKey, userId) == 1 then return 2 end
redis.call("SET", fenceKey, "1", "PX", ttlMs)
return 0

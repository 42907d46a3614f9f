--[[
  ack-outbox.lua — drop a group of reservations from one shop's outbox once MySQL has them.

  One command per group instead of HDEL + ZREM per order.

  KEYS[1]  outbox hash
  KEYS[2]  outbox-due zset
  ARGV     order ids

  Returns the number of outbox entries removed (entries already gone are ignored).
]]
local outboxKey, dueKey = KEYS[1], KEYS[2]
if #ARGV == 0 then return 0 end
local removed = 0
-- unpack is bounded by Lua's stack (~8000 values); callers send groups far below that.
removed = redis.call("HDEL", outboxKey, unpack(ARGV))
redis.call("ZREM", dueKey, unpack(ARGV))
return removed

--[[
  id-block.lua — hand out the next block of order ids: unique forever, with no lease to hold.

  A block number is B = (ms since the id epoch) × 1024 + n, so a block carries its time in its high
  bits; the ids of block B are (B << 12) | seq for seq 0..4095 (src/redis/ids.ts). The counter only
  ever moves forward: B = max(last + 1, now × 1024). Two draws therefore never get the same block,
  whatever the callers' clocks say, and a draw whose reply was lost burns one block number and
  nothing else (nothing is held, nothing expires, nothing can run out with isolate churn).
  More than 1,024 draws in one millisecond borrow the next millisecond (ids stay unique and
  increasing; their time reads at most that far ahead).

  Block numbers stay below 2^51 until 2093, so they are exact as Lua numbers (doubles) and as JSON.

  KEYS[1]  block counter (string integer: the last block number handed out); never expires
  ARGV[1]  now, ms since the id epoch (the caller's clock)

  Returns B, the block number drawn.
]]
local counterKey = KEYS[1]
local nowMs = tonumber(ARGV[1])

local last = tonumber(redis.call("GET", counterKey) or "-1")
local block = math.max(last + 1, math.floor(nowMs) * 1024)
redis.call("SET", counterKey, string.format("%.0f", block))
return block

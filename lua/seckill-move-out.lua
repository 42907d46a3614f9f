--[[
  seckill-move-out.lua — a sharded voucher (src/services/seckill/shards.ts): take stock out of this
  shard for a shard whose buyers found it dry, and log the move, atomically.

  Takes min(want, ceil(stock / 2)) units — half of what is here, so the donor's own buyers keep
  the rest (and a donor with 1 unit gives it) — from the fullest buckets down, lowers this shard's
  share (meta `initial`) by as much, so stock + buyers = initial holds here, and logs the move under
  its id until the recipient applied it (seckill-move-in.lua; reconcile finishes a move whose
  process died between the two).

  KEYS[1]    meta hash (absent: the voucher is not loaded here — nothing taken)
  KEYS[2]    moves-out hash (moveId -> "toShard:units:epochMs")
  KEYS[3..]  stock buckets, all of them
  ARGV[1]    want, units (≥ 1)
  ARGV[2]    move id (unique per move)
  ARGV[3]    recipient shard index
  ARGV[4]    now, epoch ms

  Returns {taken, left}: units taken and logged (0: none here), and the stock left in this shard.
]]
if redis.call("EXISTS", KEYS[1]) == 0 then return {0, 0} end
local want = tonumber(ARGV[1])
local stocks, total = {}, 0
for i = 3, #KEYS do
  local v = tonumber(redis.call("GET", KEYS[i]) or "0")
  if v < 0 then v = 0 end
  stocks[i] = v
  total = total + v
end
local take = math.min(want, math.ceil(total / 2))
if take <= 0 then return {0, total} end
local need = take
while need > 0 do
  local best, bestV = 0, 0
  for i = 3, #KEYS do
    if stocks[i] > bestV then best, bestV = i, stocks[i] end
  end
  local d = math.min(need, bestV)
  redis.call("DECRBY", KEYS[best], d)
  stocks[best] = bestV - d
  need = need - d
end
redis.call("HINCRBY", KEYS[1], "initial", -take)
redis.call("HSET", KEYS[2], ARGV[2], ARGV[3] .. ":" .. take .. ":" .. ARGV[4])
return {take, total - take}

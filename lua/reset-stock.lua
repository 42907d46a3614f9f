--[[
  reset-stock.lua — reconcile repair: set a voucher's Redis stock from its buyers, atomically.

  Invariant kept by reserve/release: sum(buckets) + |buyers| = initial stock. When the buckets have
  drifted (a key lost, a manual edit), stock is recomputed as initial − |buyers| and spread over the
  buckets, in one script so no reservation interleaves with the repair.

  KEYS[1]     buyers set
  KEYS[2..]   stock buckets (all of them, bucket 0 first)
  ARGV[1]     initial stock

  Returns {before, after}: summed stock before and after.
]]
local buyersKey = KEYS[1]
local initial = tonumber(ARGV[1])
local n = #KEYS - 1

local before = 0
for i = 2, #KEYS do before = before + tonumber(redis.call("GET", KEYS[i]) or "0") end

local target = math.max(0, initial - redis.call("SCARD", buyersKey))
local base = math.floor(target / n)
local extra = target % n
for i = 2, #KEYS do
  local share = base
  if (i - 2) < extra then share = share + 1 end
  redis.call("SET", KEYS[i], share)
end
return {before, target}

--[[
  reset-stock.lua — reconcile repair: set a voucher's Redis stock from its buyers, atomically.

  Invariant kept by reserve/release: sum(buckets) + |buyers| = initial stock. When the buckets have
  drifted (a key lost, a manual edit), stock is recomputed as initial − |buyers| and spread over the
  buckets, in one script so no reservation interleaves with the repair.

  A sharded voucher's shard (src/services/seckill/shards.ts) has a share that moves with its stock
  (meta `initial`, changed by seckill-move-out/-in.lua), so its check and repair read the share in
  the same step: ARGV[2] = "meta" makes the last key the meta hash, and the script resets only if
  the shard has drifted.

  KEYS[1]     buyers set
  KEYS[2..]   stock buckets (all of them, bucket 0 first)
  KEYS[last]  with ARGV[2] = "meta": the meta hash
  ARGV[1]     initial stock (ignored with ARGV[2] = "meta")
  ARGV[2]     optional "meta"

  Returns {before, after, changed}: summed stock before and after, 1 if it was reset.
]]
local buyersKey = KEYS[1]
local initial = tonumber(ARGV[1])
local last = #KEYS
local fromMeta = ARGV[2] == "meta"
if fromMeta then
  last = #KEYS - 1
  initial = tonumber(redis.call("HGET", KEYS[#KEYS], "initial") or "-1")
  if initial < 0 then return {0, 0, 0} end
end
local n = last - 1

local before = 0
for i = 2, last do before = before + tonumber(redis.call("GET", KEYS[i]) or "0") end
local buyers = redis.call("SCARD", buyersKey)
if fromMeta and before + buyers == initial then return {before, before, 0} end

local target = math.max(0, initial - buyers)
local base = math.floor(target / n)
local extra = target % n
for i = 2, last do
  local share = base
  if (i - 2) < extra then share = share + 1 end
  redis.call("SET", KEYS[i], share)
end
return {before, target, 1}

--[[
  sale-counts.lua — one isolate's flush of its seckill attempt counters (src/console/counters.ts):
  adds the attempts by outcome it counted since its last flush to each voucher's hash, which then
  holds the sum over all isolates, and renews each touched hash's TTL. One command per isolate per
  flush, however many vouchers it counted.

  KEYS[k]  seckill:{counts}:v<voucherId>   HASH outcome → attempts, summed over isolates (k ≥ 1)

  ARGV[1]  ttl   ms each touched hash is kept after its last flush
  ARGV[3j-1], ARGV[3j], ARGV[3j+1]  (j ≥ 1) k (1-based index into KEYS), outcome, attempts to add (integer > 0)

  Returns the number of increments applied.
]]
local ttl = tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV - 2, 3 do
  redis.call("HINCRBY", KEYS[tonumber(ARGV[i])], ARGV[i + 1], tonumber(ARGV[i + 2]))
  n = n + 1
end
for k = 1, #KEYS do
  redis.call("PEXPIRE", KEYS[k], ttl)
end
return n

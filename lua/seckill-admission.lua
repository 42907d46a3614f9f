--[[
  seckill-admission.lua — lease up to `want` seckill admission tokens for one voucher and one
  second (src/services/seckill/admission.ts), in one command.

  Two counters per second: the voucher's (attempts admitted to Redis for it) and the total across
  all vouchers (admitted attempts plus one per granted lease: the lease is a command too). A grant
  never lets either pass its cap, so the reserve commands of one second (plus these leases) stay
  within the budget whatever the number of isolates. Both keys share the `{adm}` hash tag.

  KEYS[1]  voucher counter for the second (integer string)
  KEYS[2]  total counter for the second (integer string)
  ARGV[1]  tokens wanted (>= 1)
  ARGV[2]  per-voucher cap per second
  ARGV[3]  total cap per second
  ARGV[4]  counters' TTL, ms (a few seconds: they are never read after their second)

  Returns {granted, left}: tokens granted (0..want) and how many the voucher could still get this
  second after this grant (0 = the second's budget is spent: the caller stops asking until the
  next second).
]]
local want = tonumber(ARGV[1])
local vcap = tonumber(ARGV[2])
local tcap = tonumber(ARGV[3])
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local t = tonumber(redis.call('GET', KEYS[2]) or '0')
-- The lease itself takes one unit of the total.
local g = math.min(want, vcap - v, tcap - t - 1)
if g < 0 then g = 0 end
if g > 0 then
  redis.call('INCRBY', KEYS[1], g)
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  redis.call('INCRBY', KEYS[2], g + 1)
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  t = t + g + 1
end
local left = math.min(vcap - v - g, tcap - t - 1)
if left < 0 then left = 0 end
return {g, left}

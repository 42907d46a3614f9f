--[[
  upload-quota.lua — reserve `bytes` of one user's daily upload quota, or refuse, atomically
  (src/services/upload-limits.ts). Two concurrent uploads can never both pass the cap: the check
  and the increment are one script. A refund (the store failed, the upload was rejected) is a
  plain DECRBY of the same key by the caller.

  KEYS[1]  the user's bytes used on that service day (integer string)
  ARGV[1]  bytes to reserve (>= 1)
  ARGV[2]  cap, bytes per day
  ARGV[3]  TTL, seconds (outlives the day, so a refund late in the day finds the key)

  Returns {ok, used}: ok 1 with the bytes used after the reservation, or ok 0 with the bytes
  used so far (nothing reserved).
]]
local bytes = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used + bytes > cap then
  return {0, used}
end
used = redis.call('INCRBY', KEYS[1], bytes)
redis.call('EXPIRE', KEYS[1], ARGV[3])
return {1, used}

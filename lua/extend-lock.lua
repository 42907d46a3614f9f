--[[
  extend-lock.lua — push a held lock's expiry out, only if we still own it.

  Long jobs renew their lock while they work so it does not expire under them.

  KEYS[1]  lock key
  ARGV[1]  owner token
  ARGV[2]  new time to live, milliseconds

  Returns 1 when extended, 0 when the lock is not ours (any more).
]]
local lockKey = KEYS[1]
local owner = ARGV[1]
local ttlMs = tonumber(ARGV[2])

if redis.call("GET", lockKey) == owner then
  return redis.call("PEXPIRE", lockKey, ttlMs)
end
return 0

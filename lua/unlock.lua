--[[
  unlock.lua — release a lock only if we still own it (compare-and-delete).

  A plain DEL could remove a lock that already expired and was taken by someone else; comparing
  the owner token first, atomically, makes release safe.

  KEYS[1]  lock key (e.g. lock:{name})
  ARGV[1]  owner token set when the lock was taken (random, per acquisition)

  Returns 1 when the lock was ours and is now released, 0 otherwise.
]]
local lockKey = KEYS[1]
local owner = ARGV[1]

if redis.call("GET", lockKey) == owner then
  return redis.call("DEL", lockKey)
end
return 0

--[[
  idempotency-finish.lua — end a claim: store the final response, or release the key.

  Compare-and-set on the claim's own running record: a claim whose lease ran out (and was maybe
  taken by a retry since) must not overwrite or delete what the key holds now.

  KEYS[1]  idem:{caller}:{hash}
  ARGV[1]  the running record this claim set (idempotency-claim.lua ARGV[1])
  ARGV[2]  the done record to store, or "" to release the key (a retry then runs again)
  ARGV[3]  how long the done record is kept, seconds (IDEMPOTENCY_TTL_SECONDS)

  Returns 1 when the claim was still ours (stored or released), 0 otherwise.
]]
local recordKey = KEYS[1]
local running = ARGV[1]
local done = ARGV[2]
local ttlSeconds = tonumber(ARGV[3])

if redis.call("GET", recordKey) ~= running then
  return 0
end
if done == "" then
  redis.call("DEL", recordKey)
else
  redis.call("SET", recordKey, done, "EX", ttlSeconds)
end
return 1

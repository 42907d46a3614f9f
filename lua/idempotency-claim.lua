--[[
  idempotency-claim.lua — claim an Idempotency-Key for one request, or read what holds it.

  One command for every keyed request's first step (src/http/idempotency.ts): a free key is taken
  as "running" under a lease; a taken one is returned as it is (running, or the stored response)
  with its remaining lease, so the caller decides replay / 409 / 422 without a second command.

  KEYS[1]  idem:{hash}  string record: "r…" running (fingerprint + claim token), "d…" done
  ARGV[1]  the running record to set when the key is free (unique per claim: it carries a token)
  ARGV[2]  lease, milliseconds (IDEMPOTENCY_LOCK_MS): a claimer that dies frees the key after it

  Returns {1} when claimed; {0, record, pttl} when the key is taken (pttl in ms, -1 = no expiry).
]]
local recordKey = KEYS[1]
local running = ARGV[1]
local leaseMs = tonumber(ARGV[2])

local current = redis.call("GET", recordKey)
if not current then
  redis.call("SET", recordKey, running, "PX", leaseMs)
  return {1}
end
return {0, current, redis.call("PTTL", recordKey)}

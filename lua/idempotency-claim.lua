--[[
  idempotency-claim.lua — claim an Idempotency-Key for one request, or read what holds it.

  One command for every keyed request's first step (src/http/idempotency.ts): a free key is taken
  as "running" under a lease; a taken one is returned as it is (running, or the stored response)
  with its remaining lease, so the caller decides replay / 409 / 422 without a second command.

  Every new key a caller claims is counted per clock hour, and past the caller's quota a new key is
  refused (replays, 409s and 422s of keys already held are not counted): each stored key is kept
  for a day, so without a quota one account sending a fresh key per request could fill Redis.

  KEYS[1]  idem:{caller}:{hash}  string record: "r…" running (fingerprint + claim token), "d…" done
  KEYS[2]  idem:{caller}:n:{hour}  new keys this caller claimed in this hour (integer string)
  ARGV[1]  the running record to set when the key is free (unique per claim: it carries a token)
  ARGV[2]  lease, milliseconds (IDEMPOTENCY_LOCK_MS): a claimer that dies frees the key after it
  ARGV[3]  new keys allowed per caller per hour (0 = no quota)
  ARGV[4]  ms until the hour ends (the counter's TTL and the refusal's retry-after)

  Returns {1} when claimed; {0, record, pttl} when the key is taken (pttl in ms, -1 = no expiry);
  {2, retryAfterMs} when the key is free but the caller's quota for the hour is spent.
]]
local recordKey, quotaKey = KEYS[1], KEYS[2]
local running = ARGV[1]
local leaseMs = tonumber(ARGV[2])
local quota = tonumber(ARGV[3])
local hourLeftMs = tonumber(ARGV[4])

local current = redis.call("GET", recordKey)
if not current then
  if quota > 0 then
    if tonumber(redis.call("GET", quotaKey) or "0") >= quota then return {2, hourLeftMs} end
    redis.call("INCR", quotaKey)
    redis.call("PEXPIRE", quotaKey, hourLeftMs)
  end
  redis.call("SET", recordKey, running, "PX", leaseMs)
  return {1}
end
return {0, current, redis.call("PTTL", recordKey)}

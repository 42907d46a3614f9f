--[[
  claim-outbox.lua — take up to N due reservations of one shop's outbox for the writer, atomically.

  The outbox is the order queue's source of truth between the reservation and MySQL. A writer
  claims a group by pushing each entry's due time out by a lease; a writer that dies mid-group
  leaves its entries to be claimed again once the lease runs out (the MySQL write is idempotent,
  so a second writer repeating a group changes nothing). Concurrent writers never claim the same
  entry while its lease holds, so groups do not overlap in the common case.

  KEYS[1]  outbox hash (orderId -> reservation JSON)
  KEYS[2]  outbox-due zset (orderId -> next time it may be claimed, epoch ms)
  ARGV[1]  now, epoch ms
  ARGV[2]  max entries to claim
  ARGV[3]  lease, ms

  Returns the claimed reservations' JSON payloads (a due entry whose payload is gone — acknowledged
  or released meanwhile — is dropped from the zset and not returned).
]]
local outboxKey, dueKey = KEYS[1], KEYS[2]
local now, limit, lease = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

local ids = redis.call("ZRANGEBYSCORE", dueKey, "-inf", now, "LIMIT", 0, limit)
if #ids == 0 then return {} end
local payloads = redis.call("HMGET", outboxKey, unpack(ids))
local out = {}
for i, id in ipairs(ids) do
  local p = payloads[i]
  if p then
    redis.call("ZADD", dueKey, "XX", now + lease, id)
    out[#out + 1] = p
  else
    redis.call("ZREM", dueKey, id)
  end
end
return out

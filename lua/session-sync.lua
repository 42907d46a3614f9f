--[[
  session-sync.lua — one isolate's session upkeep, in one command (src/services/session-cache.ts).

  Renews the idle timeout of the sessions the isolate saw used (and confirms those it had not seen
  before: EXPIRE answers 0 for a key that is gone), and hands back the revocations recorded since
  the isolate's cursor, so a logout in one isolate reaches every other within one upkeep interval.
  The revocation stream is a ZSET scored by a sequence number (INCR), not by a clock, so isolates
  with skewed clocks never miss an entry; lua/session-revoke.lua appends to it and trims it.

  Cluster note: the session keys cannot share a hash tag (their names are the classic
  `login:token:<token>`), so this script assumes one keyspace, as Upstash provides. On a Redis
  Cluster it would have to be split by slot.

  KEYS[1]    login:revoked       ZSET sid → revocation sequence number
  KEYS[2]    login:revoked:seq   string, the last sequence number handed out
  KEYS[3..]  login:token:<token> session hashes to renew / confirm

  ARGV[1]  cursor  last sequence number the isolate applied; -1 = none yet (start from now)
  ARGV[2]  ttl     idle timeout, seconds
  ARGV[3]  limit   most revocations returned by one call (integer ≥ 1)

  Returns { cursor, truncated, oldest, sids, missing }:
    cursor     the sequence number the isolate has now seen up to
    truncated  1 when `limit` revocations were returned and more may follow (call again), else 0
    oldest     lowest sequence number still in the ZSET (0 when empty): when it exceeds cursor + 1
               the isolate fell behind the trimmed stream and must forget what it trusted
    sids       revoked session ids with a sequence number above the cursor, oldest first
    missing    1-based positions, among KEYS[3..], of sessions that no longer exist
]]
local revokedKey = KEYS[1]
local seqKey = KEYS[2]
local cursor = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

local missing = {}
for i = 3, #KEYS do
  if redis.call("EXPIRE", KEYS[i], ttl) == 0 then
    missing[#missing + 1] = i - 2
  end
end

local seq = tonumber(redis.call("GET", seqKey) or "0")
local sids = {}
local truncated = 0
local oldest = 0
if cursor >= 0 then
  local first = redis.call("ZRANGE", revokedKey, 0, 0, "WITHSCORES")
  if #first == 2 then
    oldest = tonumber(first[2])
  end
  local got = redis.call("ZRANGEBYSCORE", revokedKey, "(" .. cursor, "+inf", "WITHSCORES", "LIMIT", 0, limit)
  for j = 1, #got, 2 do
    sids[#sids + 1] = got[j]
  end
  if #got == 2 * limit then
    truncated = 1
    seq = tonumber(got[#got])
  end
end
return { seq, truncated, oldest, sids, missing }

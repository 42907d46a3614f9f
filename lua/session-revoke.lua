--[[
  session-revoke.lua — end a session: delete its record and append its id to the revocation stream
  that every isolate polls (lua/session-sync.lua), atomically, so no isolate can confirm the
  session after its id was handed out and miss the revocation.

  KEYS[1]  login:token:<token>  the session hash
  KEYS[2]  login:revoked        ZSET sid → revocation sequence number
  KEYS[3]  login:revoked:seq    string, the last sequence number handed out

  ARGV[1]  sid   session id: "j:<jti>" for a signed token, "l:<token>" for a legacy one
  ARGV[2]  keep  how many newest revocations the stream keeps (integer ≥ 1); an isolate further
                 behind than that forgets everything it trusted (see session-sync.lua `oldest`)

  Returns the revocation's sequence number.
]]
local sessionKey = KEYS[1]
local revokedKey = KEYS[2]
local seqKey = KEYS[3]
local sid = ARGV[1]
local keep = tonumber(ARGV[2])

redis.call("DEL", sessionKey)
local seq = redis.call("INCR", seqKey)
redis.call("ZADD", revokedKey, seq, sid)
redis.call("ZREMRANGEBYRANK", revokedKey, 0, -(keep + 1))
return seq

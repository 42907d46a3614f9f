--[[
  blog-like-toggle.lua — like or unlike a note for one user, atomically, and version the count.

  The classic service checked membership, updated MySQL, then changed the set in three separate
  steps, so two concurrent toggles by one user could both "like" (double count) or lose an update.
  Here the check and the change are one atomic step; the caller then writes `count` to MySQL
  guarded by `version`, so concurrent or reordered writers converge on the newest count.

  KEYS[1]  blog:liked:{id}          ZSET  member = user id, score = like time (epoch ms)
  KEYS[2]  blog:liked:{id}:version  string, the last version handed out for this note
  ARGV[1]  user id
  ARGV[2]  now, epoch ms (recorded as the like time)

  Returns { delta, count, version }:
    delta    1 = liked now, -1 = unliked now
    count    ZCARD after the change: the value tb_blog.liked must hold
    version  max(now * 1000, previous + 1): strictly increasing per note while the key lives, and
             still above every earlier version if the key is lost (it tracks the clock, in
             "microsecond-scaled" ms, < 2^53 so it survives doubles and JSON)
]]
local likedKey = KEYS[1]
local versionKey = KEYS[2]
local userId = ARGV[1]
local nowMs = tonumber(ARGV[2])

local delta
if redis.call("ZSCORE", likedKey, userId) then
  redis.call("ZREM", likedKey, userId)
  delta = -1
else
  redis.call("ZADD", likedKey, nowMs, userId)
  delta = 1
end

local version = nowMs * 1000
local previous = tonumber(redis.call("GET", versionKey) or "0")
if previous >= version then
  version = previous + 1
end
-- %.0f: a plain number argument would be formatted with 14 significant digits and lose precision.
redis.call("SET", versionKey, string.format("%.0f", version))

return { delta, redis.call("ZCARD", likedKey), version }

--[[
  seckill-move-in.lua — a sharded voucher: apply a move logged by seckill-move-out.lua on the
  donor, once: the units join this shard's first bucket and its share (meta `initial`).

  KEYS[1]  meta hash (absent: the voucher is not loaded here — nothing applied, the donor's log
           keeps the move for reconcile, which reloads this shard first)
  KEYS[2]  moves-in set (ids applied here; TTL refreshed)
  KEYS[3]  the stock bucket to credit
  ARGV[1]  move id
  ARGV[2]  units
  ARGV[3]  TTL of the moves-in set, seconds (longer than any move can stay unapplied)

  Reconcile's credit of a deficit (units lost for good, given back to shard 0) is a move too, with
  a compare-and-set on the credit guard, so that two passes that read the same shares credit once:
  KEYS[4]  credit guard (string; absent = "")
  ARGV[4]  the guard's value when the pass read the shares; the guard becomes the move id

  Returns 1 applied now, 0 applied before, -1 not loaded here, -2 guard changed (another pass
  credited or reloaded since this one read the shares: nothing applied).
]]
if redis.call("EXISTS", KEYS[1]) == 0 then return -1 end
if KEYS[4] and (redis.call("GET", KEYS[4]) or "") ~= ARGV[4] then return -2 end
if redis.call("SADD", KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call("EXPIRE", KEYS[2], ARGV[3])
if KEYS[4] then redis.call("SET", KEYS[4], ARGV[1], "EX", ARGV[3]) end
redis.call("INCRBY", KEYS[3], ARGV[2])
redis.call("HINCRBY", KEYS[1], "initial", ARGV[2])
return 1

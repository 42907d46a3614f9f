--[[
  cache-fill.lua — writes what an origin load found into L2 and, in the same step, the module's
  ceiling (when the load found nothing and none was known) and releases the caller's rebuild lock
  (compare-and-delete, as unlock.lua). One command after a cache-probe.lua miss.

  The ceiling is written only if absent (NX): a write of a newer, higher id (CacheModule.set) drops
  it, and an older load must not put a lower one back over a raise. A ceiling that is stale anyway
  (a create raced this load) hides an id only while its L2 entry is also missing, and for at most
  ARGV[5] seconds — the same bound as a null entry.

  KEYS[1]  L2 entry (cache:{<module>:b<n>}:<id>)
  KEYS[2]  rebuild lock (lock:cache:{<module>:b<n>}:<id>)
  KEYS[3]  the bucket's copy of the module's ceiling (cache-ceiling:{<module>:b<n>}); the caller
           writes the other buckets' copies itself (each in its own slot). One hash tag: valid on
           a cluster.
  ARGV[1]  entry JSON
  ARGV[2]  entry TTL, seconds
  ARGV[3]  lock token, or "" when no lock is held
  ARGV[4]  the ceiling to write (integer), or "" for none
  ARGV[5]  the ceiling's TTL, seconds

  Returns 1 when the lock was ours and is released, else 0.
]]
redis.call("SET", KEYS[1], ARGV[1], "EX", ARGV[2])
if ARGV[4] ~= "" then redis.call("SET", KEYS[3], ARGV[4], "NX", "EX", ARGV[5]) end
if ARGV[3] ~= "" and redis.call("GET", KEYS[2]) == ARGV[3] then return redis.call("DEL", KEYS[2]) end
return 0

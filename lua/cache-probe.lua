--[[
  cache-probe.lua — a cache module's L2 read in one command (src/cache/module.ts): the entry if
  there is one; else, for a numeric key above the module's ceiling (the largest id the origin held
  when the ceiling was written), "absent" without any origin query; else the rebuild lock, taken in
  the same step, so the one caller that loads from MySQL is chosen without another round trip.

  A miss that used to cost GET + SET NX + GET (and then SET + unlock) costs this one call, then one
  cache-fill.lua after the origin load; an id above the ceiling costs this call alone (misses cost
  ≤ 1 Redis command each, amortised).

  All three keys carry the hash tag of the entry's bucket, {<module>:b<n>} (src/redis/keys.ts), so
  the script is valid on a cluster.

  KEYS[1]  L2 entry (cache:{<module>:b<n>}:<id>)
  KEYS[2]  rebuild lock (lock:cache:{<module>:b<n>}:<id>)
  KEYS[3]  the bucket's copy of the module's ceiling (cache-ceiling:{<module>:b<n>}; integer
           string, TTL = the null TTL)
  ARGV[1]  the key as an integer, or "" when the module has no ceiling
  ARGV[2]  lock token, or "" when the module takes no lock (plain strategy)
  ARGV[3]  lock lifetime, ms

  Returns {1, entry} found; {2} absent (above the ceiling); {3, known} absent, lock taken;
  {4, known} absent, lock held by another caller; {0, known} absent, no lock asked.
  known = 1 when a ceiling was present (the key is at or below it), 0 when there was none.
]]
local entry = redis.call("GET", KEYS[1])
if entry then return {1, entry} end

local known = 0
if ARGV[1] ~= "" then
  local ceiling = redis.call("GET", KEYS[3])
  if ceiling then
    if tonumber(ARGV[1]) > tonumber(ceiling) then return {2} end
    known = 1
  end
end

if ARGV[2] == "" then return {0, known} end
if redis.call("SET", KEYS[2], ARGV[2], "NX", "PX", ARGV[3]) then return {3, known} end
return {4, known}

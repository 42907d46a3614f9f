--[[
  listing-sync.lua — one isolate's share of the per-IP listing limit (src/http/listing-limit.ts):
  adds the requests it allowed per address since its last sync to the current window's hash, and
  returns every address's global count in the current and the previous window. One command per
  isolate per LISTING_SYNC_MS, whatever the traffic.

  KEYS[1]  {listing}:w<n>    HASH ip → requests allowed in window n, all isolates
  KEYS[2]  {listing}:w<n-1>  the previous window's hash (read only)

  ARGV[1]  ttl   ms the current hash is kept (two windows and a margin: the next window reads it as "previous")
  ARGV[2k], ARGV[2k+1]  (k ≥ 1) ip, requests to add (integer ≥ 0)

  Returns { cur1, prev1, cur2, prev2, … } in ARGV order.
]]
local cur = KEYS[1]
local prev = KEYS[2]
local ttl = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV - 1, 2 do
  local ip = ARGV[i]
  local n = tonumber(ARGV[i + 1])
  local c
  if n > 0 then
    c = redis.call("HINCRBY", cur, ip, n)
  else
    c = tonumber(redis.call("HGET", cur, ip) or "0")
  end
  out[#out + 1] = c
  out[#out + 1] = tonumber(redis.call("HGET", prev, ip) or "0")
end
redis.call("PEXPIRE", cur, ttl)
return out

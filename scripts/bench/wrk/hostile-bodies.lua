-- wrk request script of the hostile side of shop-l1-hostile: POST /api/user/login (a route that
-- needs ~60 bytes) with hostile JSON bodies, three kinds round robin:
--   1. 1 MiB of nested arrays `[[[[…]]]]` with Content-Length (the outer MAX_BODY_BYTES bound);
--   2. the same 1 MiB sent chunked (Transfer-Encoding: chunked, no Content-Length), 64 KiB chunks;
--   3. 1,000 bytes of `[[[[…]]]]` (under the route's byte limit: only the nesting bound stops it).
--
--   wrk -c50 -d2s -s hostile-bodies.lua http://127.0.0.1:P/api/user/login [-- KINDS]
--
-- KINDS (optional, comma-separated, default all): cl, chunked, small — to find which one hurts.
--
-- The raw requests are built once per thread in init(); request() only picks the next one. The
-- server may answer 413/400 before reading a body and close the connection: wrk reconnects and
-- counts a socket error, which is expected here (the runner reports the hostile side's answers and
-- errors, it does not fail on them).
local requests = {}
local i = 0

local function nested(bytes)
  local half = math.floor(bytes / 2)
  return string.rep("[", half) .. string.rep("]", bytes - half)
end

function init(args)
  local host = wrk.headers["Host"] or (wrk.host .. ":" .. wrk.port)
  local mib = nested(1024 * 1024)
  requests[1] = wrk.format("POST", wrk.path, { ["Content-Type"] = "application/json" }, mib)
  local chunks = {}
  local size = 64 * 1024
  for at = 1, #mib, size do
    local c = string.sub(mib, at, at + size - 1)
    chunks[#chunks + 1] = string.format("%x\r\n%s\r\n", #c, c)
  end
  requests[2] = "POST " .. wrk.path .. " HTTP/1.1\r\nHost: " .. host ..
    "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" .. table.concat(chunks) .. "0\r\n\r\n"
  requests[3] = wrk.format("POST", wrk.path, { ["Content-Type"] = "application/json" }, nested(1000))
  local want = args[1]
  if want ~= nil and want ~= "" and want ~= "all" then
    local byKind = { cl = requests[1], chunked = requests[2], small = requests[3] }
    local picked = {}
    for k in string.gmatch(want, "[^,]+") do
      if byKind[k] == nil then error("unknown hostile body kind " .. k) end
      picked[#picked + 1] = byKind[k]
    end
    requests = picked
  end
end

function request()
  i = i % #requests + 1
  return requests[i]
end

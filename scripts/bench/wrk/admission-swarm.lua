-- wrk request script of group "admission": a swarm of distinct buyers on one voucher whose stock
-- outlasts the window, so every answer is a success, a DUPLICATE_ORDER, or a 429 (admission).
--
--   wrk -c200 -d2s --latency -s admission-swarm.lua http://127.0.0.1:P/api/voucher-order/seckill/42 -- TOKENS_FILE
--
-- Tokens round robin from TOKENS_FILE (one session token per line), as wrk/seckill-swarm.lua.
-- done() prints one line the runner parses:
--   ADMISSION successes=N duplicate=N refused=N other=N
local requests = {}
local n = 0
local i = 0

successes = 0
duplicate = 0
refused = 0
other = 0

local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_no", #threads)
end

function init(args)
  local path = args[1]
  if path == nil then error("admission-swarm.lua needs the tokens file: wrk ... <url> -- TOKENS_FILE") end
  for line in io.lines(path) do
    if #line > 0 then
      n = n + 1
      requests[n] = wrk.format("POST", wrk.path, { ["authorization"] = line }, "")
    end
  end
  if n == 0 then error("no tokens in " .. path) end
  i = ((thread_no or 1) - 1) * 4999 % n
end

function request()
  i = i % n + 1
  return requests[i]
end

function response(status, headers, body)
  if status == 429 and string.find(body, '"RATE_LIMITED"', 1, true) then
    refused = refused + 1
  elseif status == 200 and string.find(body, '"success":true', 1, true) then
    successes = successes + 1
  elseif status == 200 and string.find(body, '"DUPLICATE_ORDER"', 1, true) then
    duplicate = duplicate + 1
  else
    other = other + 1
  end
end

function done(summary, latency, reqs)
  local s, d, r, o = 0, 0, 0, 0
  for _, t in ipairs(threads) do
    s = s + t:get("successes")
    d = d + t:get("duplicate")
    r = r + t:get("refused")
    o = o + t:get("other")
  end
  io.write(string.format("ADMISSION successes=%d duplicate=%d refused=%d other=%d\n", s, d, r, o))
end

-- wrk request script of group "shards": a crowd of distinct buyers on one sharded voucher whose
-- per-database admission refuses most of them, attempting until the runner stops wrk (SIGINT) at
-- the sell-out.
--
--   wrk -c200 -d20s --latency -s shards-swarm.lua http://127.0.0.1:P/api/voucher-order/seckill/42 -- TOKENS_FILE
--
-- Tokens round robin from TOKENS_FILE (one session token per line, one user each), as
-- wrk/seckill-swarm.lua; threads start at different offsets of the list. done() prints one line
-- the runner parses:
--   SHARDS successes=N sold_out=N duplicate=N refused=N s5xx=N other=N
-- refused = 429 RATE_LIMITED (the admission gate, answered from memory), s5xx = any 5xx, other =
-- any other answer; and, if there was an "other" or a 5xx, the first one a thread saw:
--   SHARDS_FIRST <status> <body, newlines as spaces>
local requests = {}
local n = 0
local i = 0

successes = 0
sold_out = 0
duplicate = 0
refused = 0
s5xx = 0
other = 0
first_odd = ""

local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_no", #threads)
end

function init(args)
  local path = args[1]
  if path == nil then error("shards-swarm.lua needs the tokens file: wrk ... <url> -- TOKENS_FILE") end
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

local function odd(status, body)
  if first_odd == "" then first_odd = status .. " " .. string.gsub(string.sub(body or "", 1, 300), "[\r\n]", " ") end
end

function response(status, headers, body)
  if status == 429 and string.find(body, '"RATE_LIMITED"', 1, true) then
    refused = refused + 1
  elseif status == 200 and string.find(body, '"success":true', 1, true) then
    successes = successes + 1
  elseif status == 200 and string.find(body, '"SOLD_OUT"', 1, true) then
    sold_out = sold_out + 1
  elseif status == 200 and string.find(body, '"DUPLICATE_ORDER"', 1, true) then
    duplicate = duplicate + 1
  elseif status >= 500 then
    s5xx = s5xx + 1
    odd(status, body)
  else
    other = other + 1
    odd(status, body)
  end
end

function done(summary, latency, reqs)
  local s, so, d, r, f, o, first = 0, 0, 0, 0, 0, 0, ""
  for _, t in ipairs(threads) do
    s = s + t:get("successes")
    so = so + t:get("sold_out")
    d = d + t:get("duplicate")
    r = r + t:get("refused")
    f = f + t:get("s5xx")
    o = o + t:get("other")
    if first == "" then first = t:get("first_odd") end
  end
  io.write(string.format("SHARDS successes=%d sold_out=%d duplicate=%d refused=%d s5xx=%d other=%d\n", s, so, d, r, f, o))
  if first ~= "" then io.write("SHARDS_FIRST " .. first .. "\n") end
end

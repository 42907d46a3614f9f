-- wrk request script of group "seckill": a swarm of distinct buyers on one voucher.
--
--   wrk -c200 -d2s --latency -s seckill-swarm.lua http://127.0.0.1:P/api/voucher-order/seckill/42 -- TOKENS_FILE
--
-- Every request is `POST <url path>` with `authorization: <token>`, the tokens taken round robin
-- from TOKENS_FILE (one session token per line, one user each), so the first len(tokens) requests
-- come from distinct users. Requests are formatted once per thread in init(); request() only
-- picks the next one. Threads start at different offsets of the list.
--
-- response() sorts the answers by outcome: successes (`"success":true`, body `"data":"<order id>"`),
-- SOLD_OUT, DUPLICATE_ORDER, anything else with status 200. It keeps the smallest and largest
-- order id seen (64-bit decimal strings, compared as strings: too large for Lua numbers), from
-- which the runner derives when the first and the last unit were sold (ids embed their ms).
-- done() sums the threads and prints one line the runner parses:
--   SECKILL successes=N sold_out=N duplicate=N other=N min_id=ID max_id=ID
-- and a second one with the answers whose status was not 200, by class (wrk itself only counts
-- them as "Non-2xx or 3xx responses"):
--   SECKILL_STATUS 3xx=N 4xx=N 5xx=N
-- and, if any answer was a 5xx, the first one a thread saw (status and the start of its body):
--   SECKILL_5XX <status> <body, newlines as spaces>
local requests = {}
local n = 0
local i = 0

-- Per-thread outcome counters (read by done() through thread:get).
successes = 0
sold_out = 0
duplicate = 0
other = 0
min_id = ""
max_id = ""
status_3xx = 0
status_4xx = 0
status_5xx = 0
first_5xx = ""

-- Main state only: the threads, for done(). Each thread gets its number as the global `thread_no`.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_no", #threads)
end

function init(args)
  local path = args[1]
  if path == nil then error("seckill-swarm.lua needs the tokens file: wrk ... <url> -- TOKENS_FILE") end
  for line in io.lines(path) do
    if #line > 0 then
      n = n + 1
      requests[n] = wrk.format("POST", wrk.path, { ["authorization"] = line }, "")
    end
  end
  if n == 0 then error("no tokens in " .. path) end
  -- Offsets far apart (a prime stride) so threads do not send the same users at the same time.
  i = ((thread_no or 1) - 1) * 4999 % n
end

function request()
  i = i % n + 1
  return requests[i]
end

-- Numeric order of non-negative decimal strings without leading zeros.
local function less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

function response(status, headers, body)
  if status ~= 200 then
    if status >= 500 then
      status_5xx = status_5xx + 1
      if first_5xx == "" then first_5xx = status .. " " .. string.gsub(string.sub(body or "", 1, 300), "[\r\n]", " ") end
    elseif status >= 400 then status_4xx = status_4xx + 1
    elseif status >= 300 then status_3xx = status_3xx + 1 end
    return
  end
  if string.find(body, '"success":true', 1, true) then
    successes = successes + 1
    local id = string.match(body, '"data":"(%d+)"')
    if id then
      if min_id == "" or less(id, min_id) then min_id = id end
      if max_id == "" or less(max_id, id) then max_id = id end
    end
  elseif string.find(body, '"SOLD_OUT"', 1, true) then
    sold_out = sold_out + 1
  elseif string.find(body, '"DUPLICATE_ORDER"', 1, true) then
    duplicate = duplicate + 1
  else
    other = other + 1
  end
end

function done(summary, latency, reqs)
  local s, so, d, o, mn, mx = 0, 0, 0, 0, "", ""
  local s3, s4, s5, f5 = 0, 0, 0, ""
  for _, t in ipairs(threads) do
    if f5 == "" then f5 = t:get("first_5xx") end
    s3 = s3 + t:get("status_3xx")
    s4 = s4 + t:get("status_4xx")
    s5 = s5 + t:get("status_5xx")
    s = s + t:get("successes")
    so = so + t:get("sold_out")
    d = d + t:get("duplicate")
    o = o + t:get("other")
    local a, b = t:get("min_id"), t:get("max_id")
    if a ~= "" and (mn == "" or less(a, mn)) then mn = a end
    if b ~= "" and (mx == "" or less(mx, b)) then mx = b end
  end
  io.write(string.format("SECKILL successes=%d sold_out=%d duplicate=%d other=%d min_id=%s max_id=%s\n", s, so, d, o, mn, mx))
  io.write(string.format("SECKILL_STATUS 3xx=%d 4xx=%d 5xx=%d\n", s3, s4, s5))
  if f5 ~= "" then io.write("SECKILL_5XX " .. f5 .. "\n") end
end

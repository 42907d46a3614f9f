-- wrk request script of scenario "seckill-burst-10k": COUNT distinct buyers, each sends ONE
-- reservation as fast as the connections allow, then wrk stops.
--
--   wrk -t1 -c200 -d25s --latency -s seckill-burst.lua http://127.0.0.1:P/api/voucher-order/seckill/42 -- TOKENS_FILE COUNT THREADS
--
-- Thread t (1-based) of THREADS sends the tokens t, t + THREADS, t + 2·THREADS, … of the first
-- COUNT lines of TOKENS_FILE, once each. When a thread has sent its share, delay() parks its
-- connections (an hour); when it has every answer, it stops itself (wrk.thread:stop()), so wrk
-- ends as soon as the burst is answered instead of running out its -d.
-- done() prints one line the runner parses:
--   BURST sent=N answered=N successes=N sold_out=N duplicate=N other=N
local requests = {}
local share = 0
local sent = 0
answered = 0
successes = 0
sold_out = 0
duplicate = 0
other = 0

local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_no", #threads)
end

function init(args)
  local path, count, nthreads = args[1], tonumber(args[2]), tonumber(args[3] or "1")
  if path == nil or count == nil then error("seckill-burst.lua needs: -- TOKENS_FILE COUNT [THREADS]") end
  local me = thread_no or 1
  local k = 0
  for line in io.lines(path) do
    if #line > 0 then
      k = k + 1
      if k > count then break end
      if (k - 1) % nthreads == me - 1 then
        share = share + 1
        requests[share] = wrk.format("POST", wrk.path, { ["authorization"] = line }, "")
      end
    end
  end
  if share == 0 then error("no tokens for thread " .. me .. " in " .. path) end
end

function delay()
  if sent >= share then return 3600000 end
  return 0
end

function request()
  if sent < share then sent = sent + 1 end
  return requests[sent]
end

function response(status, headers, body)
  answered = answered + 1
  if status == 200 and string.find(body, '"success":true', 1, true) then
    successes = successes + 1
  elseif string.find(body, '"SOLD_OUT"', 1, true) then
    sold_out = sold_out + 1
  elseif string.find(body, '"DUPLICATE_ORDER"', 1, true) then
    duplicate = duplicate + 1
  else
    other = other + 1
  end
  if answered >= share then wrk.thread:stop() end
end

function done(summary, latency, reqs)
  local a, s, so, d, o = 0, 0, 0, 0, 0
  for _, t in ipairs(threads) do
    a = a + t:get("answered")
    s = s + t:get("successes")
    so = so + t:get("sold_out")
    d = d + t:get("duplicate")
    o = o + t:get("other")
  end
  io.write(string.format("BURST answered=%d successes=%d sold_out=%d duplicate=%d other=%d\n", a, s, so, d, o))
end

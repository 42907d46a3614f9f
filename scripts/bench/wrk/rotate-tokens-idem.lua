-- wrk request script of the idempotency group: rotate-tokens.lua's requests (many distinct
-- sessions, round robin) with an `idempotency-key` header.
--
--   wrk ... -s rotate-tokens-idem.lua http://127.0.0.1:P/api/user/sign -- TOKENS_FILE METHOD MODE
--
-- MODE "same":  each session always sends the same key (KEY, a run-wide prefix): its first request
--               runs, every later one is a replay of the stored response (the rows measure replays
--               once the warm-up has touched every session).
-- MODE "fresh": every request a new key (process, thread, counter): each one claims, runs the
--               route and stores its response.
-- Requests of mode "same" are formatted once per thread in init(); "fresh" formats one per
-- request (a string concatenation and wrk.format — wrk-side work the "same" row does not do).
-- No response() callback (wrk then hands no bodies to Lua); non-2xx count as errors.
local requests = {}
local tokens = {}
local n = 0
local i = 0
local method = "POST"
local mode = "same"
local seq = 0
local key = "bench-key"
local proc = ""

local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_no", #threads)
end

function init(args)
  local path = args[1]
  if path == nil then error("rotate-tokens-idem.lua needs: TOKENS_FILE METHOD MODE [KEY]") end
  method = args[2] or "POST"
  mode = args[3] or "same"
  key = args[4] or key
  -- Unique per wrk process (each round is one): the start time and this state's table address.
  proc = os.time() .. "-" .. tostring({}):gsub("^table: ", "")
  for line in io.lines(path) do
    if #line > 0 then
      n = n + 1
      tokens[n] = line
      requests[n] = wrk.format(method, wrk.path, { ["authorization"] = line, ["idempotency-key"] = key }, "")
    end
  end
  if n == 0 then error("no tokens in " .. path) end
  i = ((thread_no or 1) - 1) * 997 % n
end

function request()
  i = i % n + 1
  if mode == "same" then return requests[i] end
  seq = seq + 1
  return wrk.format(method, wrk.path, { ["authorization"] = tokens[i], ["idempotency-key"] = key .. "-" .. proc .. "-t" .. (thread_no or 1) .. "-" .. seq }, "")
end

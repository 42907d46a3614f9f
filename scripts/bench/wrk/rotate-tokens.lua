-- wrk request script of the seckill sold-out, seckill-hello, session-hello and user-me rows:
-- authenticated requests from many distinct sessions, round robin.
--
--   wrk -c200 -d2s --latency -s rotate-tokens.lua http://127.0.0.1:P/api/user/me -- TOKENS_FILE [METHOD]
--
-- Every request is `METHOD <url path>` (GET unless given) with `authorization: <token>`, the
-- tokens taken round robin from TOKENS_FILE (one session token per line). Requests are formatted
-- once per thread in init(); request() only picks the next one. No response() callback: wrk then
-- does not hand bodies to Lua, so its per-request work is the same for the app rows and the
-- hello-world rows they are divided by (status codes are still checked: non-2xx count as errors).
local requests = {}
local n = 0
local i = 0

local threads = {}
function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_no", #threads)
end

function init(args)
  local path = args[1]
  if path == nil then error("rotate-tokens.lua needs the tokens file: wrk ... <url> -- TOKENS_FILE [METHOD]") end
  local method = args[2] or "GET"
  for line in io.lines(path) do
    if #line > 0 then
      n = n + 1
      requests[n] = wrk.format(method, wrk.path, { ["authorization"] = line }, method == "GET" and nil or "")
    end
  end
  if n == 0 then error("no tokens in " .. path) end
  i = ((thread_no or 1) - 1) * 997 % n
end

function request()
  i = i % n + 1
  return requests[i]
end

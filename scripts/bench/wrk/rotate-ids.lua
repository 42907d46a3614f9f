-- wrk request script of group "shop-read": requests go round-robin over ids 1..50, appended to
-- the path of the URL wrk was given (wrk.path), so one script serves every row of the group:
--   http://127.0.0.1:P/api/shop/           → /api/shop/1, /api/shop/2, …, /api/shop/50, /api/shop/1, …
--   http://127.0.0.1:P/bench/shop-origin/  → /bench/shop-origin/1, …
--   http://127.0.0.1:P/?id=                → /?id=1, … (the hello-world baseline: same wrk-side work)
-- 50 keys so the rows are not one-key artifacts (one hot L1 entry, one coalesced L2 read).
-- The requests are formatted once per thread in init(); request() only picks the next one.
-- The id count must match SHOP_IDS in scripts/bench/fixtures/app-stack.ts (setup checks ids 1..50).
local N = 50
local requests = {}
local i = 0

function init(args)
  for k = 1, N do
    requests[k] = wrk.format(nil, wrk.path .. k)
  end
end

function request()
  i = i % N + 1
  return requests[i]
end

-- wrk request script of the shop-miss rows: every request asks for a shop id that does not exist
-- and that no earlier request asked for (so no L1 or L2 null entry answers it): ids count up from
-- 1,000,000,000 + 10,000,000 × thread number, far above the seeded shops (1..200).
local base = 1000000000
local n = 0
local threads = 0

function setup(thread)
  thread:set("offset", threads * 10000000)
  threads = threads + 1
end

function request()
  n = n + 1
  return wrk.format(nil, wrk.path .. (base + offset + n))
end

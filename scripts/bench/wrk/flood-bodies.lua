-- wrk request script of the flood side of shop-l1-flood (issue 16 item 1): bodies that were cheap
-- to send and expensive to parse, round robin:
--   form       POST /console/login, 1 MB url-encoded form of ~110,000 pairs (same-origin Origin);
--   multipart  POST /api/upload/blog as a signed-in user, ~78,000 tiny parts (~4.7 MB).
--
--   wrk -c20 -d3s -s flood-bodies.lua http://127.0.0.1:P/ -- TOKEN [KINDS]
--
-- KINDS (optional, comma-separated, default all): form, multipart. Built once per thread in init().
local requests = {}
local i = 0

function init(args)
  local token = args[1] or ""
  local origin = "http://" .. (wrk.headers["Host"] or (wrk.host .. ":" .. wrk.port))
  local pairs_ = {}
  for k = 1, 110000 do pairs_[k] = "k" .. k .. "=v" end
  local form = wrk.format("POST", "/console/login", { ["Content-Type"] = "application/x-www-form-urlencoded", ["Origin"] = origin }, table.concat(pairs_, "&"))
  local boundary = "----flood"
  local parts = {}
  for k = 1, 78000 do parts[k] = "--" .. boundary .. "\r\ncontent-disposition: form-data; name=\"f" .. k .. "\"\r\n\r\nx\r\n" end
  local multipart = wrk.format("POST", "/api/upload/blog", { ["Content-Type"] = "multipart/form-data; boundary=" .. boundary, ["Authorization"] = token }, table.concat(parts) .. "--" .. boundary .. "--\r\n")
  local byKind = { form = form, multipart = multipart }
  local want = args[2]
  if want == nil or want == "" or want == "all" then
    requests = { form, multipart }
  else
    for k in string.gmatch(want, "[^,]+") do
      if byKind[k] == nil then error("unknown flood kind " .. k) end
      requests[#requests + 1] = byKind[k]
    end
  end
end

function request()
  i = i % #requests + 1
  return requests[i]
end

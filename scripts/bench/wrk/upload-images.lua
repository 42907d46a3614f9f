-- wrk request script of the upload side of shop-l1-uploads: ordinary image uploads from one
-- signed-in account, every request the same valid multipart body — one field `file` holding a PNG
-- of exactly SIZE bytes (the PNG signature, then filler: the service sniffs the signature only).
--
--   wrk -c50 -d3s -s upload-images.lua http://127.0.0.1:P/api/upload/blog -- TOKEN [SIZE]
--
-- SIZE defaults to 5 MiB (the default UPLOAD_MAX_BYTES). Answers are counted by status per thread
-- and printed by done() as one line, `statuses: 200=N,429=N,…`, after wrk's report.
local threads = {}
local req

function setup(thread)
  threads[#threads + 1] = thread
end

function init(args)
  statuses = {}
  local size = tonumber(args[2] or "") or 5 * 1024 * 1024
  local boundary = "----upload" .. tostring(size)
  local png = "\137PNG\r\n\26\n" .. string.rep("x", size - 8)
  local body = "--" .. boundary .. "\r\n"
    .. "Content-Disposition: form-data; name=\"file\"; filename=\"photo.png\"\r\n"
    .. "Content-Type: image/png\r\n\r\n"
    .. png .. "\r\n--" .. boundary .. "--\r\n"
  local headers = { ["Content-Type"] = "multipart/form-data; boundary=" .. boundary, ["Authorization"] = args[1] or "" }
  req = wrk.format("POST", nil, headers, body)
end

function request()
  return req
end

function response(status)
  statuses[status] = (statuses[status] or 0) + 1
end

function done()
  local total = {}
  for _, t in ipairs(threads) do
    for status, n in pairs(t:get("statuses") or {}) do total[status] = (total[status] or 0) + n end
  end
  local parts = {}
  for status, n in pairs(total) do parts[#parts + 1] = status .. "=" .. n end
  table.sort(parts)
  io.write("statuses: " .. table.concat(parts, ",") .. "\n")
end

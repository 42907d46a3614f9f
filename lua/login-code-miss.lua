--[[
  login-code-miss.lua — count one wrong attempt against a login code; burn it at the limit.

  Only an existing code is counted (a code that expired or was burned must not come back as a
  hash holding just a counter).

  KEYS[1]  login:code:{phone}  hash { code, tries }
  ARGV[1]  max wrong attempts a code survives (integer)

  Returns the attempts left after this one (0 = the code is now burned), or -1 when no code exists.
]]
local codeKey = KEYS[1]
local maxTries = tonumber(ARGV[1])

if redis.call("EXISTS", codeKey) == 0 then
  return -1
end
local tries = redis.call("HINCRBY", codeKey, "tries", 1)
if tries >= maxTries then
  redis.call("DEL", codeKey)
  return 0
end
return maxTries - tries

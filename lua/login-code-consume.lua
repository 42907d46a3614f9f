--[[
  login-code-consume.lua — use up a login code, once.

  The caller has already compared the code in constant time; this makes consumption atomic so two
  concurrent logins with the same code cannot both succeed, and a code that was replaced (re-sent)
  meanwhile is not consumed by mistake.

  KEYS[1]  login:code:{phone}  hash { code, tries }
  ARGV[1]  the code the caller verified

  Returns 1 when consumed, 0 when the stored code is gone or different.
]]
local codeKey = KEYS[1]
local code = ARGV[1]

if redis.call("HGET", codeKey, "code") == code then
  redis.call("DEL", codeKey)
  return 1
end
return 0

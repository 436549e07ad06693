-- The start of a script run once per request (request_end.lua runs it): its body, up to
-- request_end.lua, is the function `body`.
-- The server's clock, in ms since the epoch: a request's deadline is on it.
local function server_now_ms()
  local time = redis.call('time')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local function body()

-- (Every script starts with this file.) The server's clock, on which every deadline is, in
-- ms since the epoch.
local function server_now_ms()
  local time = redis.call('time')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
-- The refusal of a copy of `what` that reached the server at `now`, after its deadline: an
-- error starting with REDLEASE_LATE and the server's time.
local function refused_late(now, what)
  return redis.error_reply('REDLEASE_LATE ' .. string.format('%d', now) .. ' ' .. what ..
    ' reached the server after its deadline')
end

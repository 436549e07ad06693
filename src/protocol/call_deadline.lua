-- The start of a script whose copies must not run after their deadline (its last argument:
-- ms since the epoch, on the server's clock; the call is sent once): a copy held up in the
-- network past it is refused with an error starting with REDLEASE_LATE and the server's
-- time, and changes nothing.
do
  local time = redis.call('time')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  if now > tonumber(ARGV[#ARGV]) then
    return redis.error_reply('REDLEASE_LATE ' .. string.format('%d', now) ..
      ' the call reached the server after its deadline ' .. ARGV[#ARGV])
  end
end

-- The start of a script whose copies must not run after their deadline (its last argument:
-- ms since the epoch, on the server's clock; the call is sent once): a copy held up in the
-- network past it is refused with an error starting with REDLEASE_LATE and the server's
-- time, and changes nothing.
do
  local now = server_now_ms()
  if now > tonumber(ARGV[#ARGV]) then
    return refused_late(now, 'the call')
  end
end

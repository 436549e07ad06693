end
-- The end of an undo of an acquisition try. Its last argument is the deadline of the try it
-- undoes (try_deadline.lua), 0 when no copy of it can come any more. Until that deadline has
-- passed on the server's clock, a copy of the try may still arrive and take the lock after
-- this undo ran: the undo answers -1 then, and is sent again (by the cleanup thread) until it
-- runs after the deadline, when nothing can come any more. Otherwise it answers what its body
-- answered.
local answer = undo_body()
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if now <= tonumber(ARGV[#ARGV]) then
  return -1
end
return answer

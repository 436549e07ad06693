end
-- The end of an undo of an acquisition try. Its last argument is the deadline of the try it
-- undoes (try_deadline.lua), 0 when no copy of it can come any more. Until that deadline has
-- passed on the server's clock, a copy of the try may still arrive and take the lock after
-- this undo ran: the undo answers {-1, ms until the deadline} then, and is sent again (by the
-- cleanup thread) once the deadline has passed, when nothing can come any more. Otherwise it
-- answers what its body answered.
local answer = undo_body()
local left = tonumber(ARGV[#ARGV]) - server_now_ms()
if left >= 0 then
  return {-1, left}
end
return answer

end
-- The end of a script run once per request. Its last key is the request's key; its last two
-- arguments are the request's deadline and until when its answer is kept, both in ms since
-- the epoch on the server's clock (the keeping ends after the deadline).
-- Sent twice: the first run keeps its answer under the request's key, and a second run of
-- the same request (its first answer was lost with its connection) answers it again and
-- changes nothing. A copy that reaches the server after the deadline, and finds no answer
-- kept, is refused with an error starting with REDLEASE_LATE and the server's time: whatever
-- ran of the request before the deadline keeps its answer until after it, so a copy that
-- finds none is one that never ran, and one that comes this late (held up in the network past
-- every resend of it) must not run now. An undo (request_undo.lua) leaves a request's key
-- marked undone: a run that comes after it changes nothing and answers nil. A body that fails
-- changes nothing and keeps nothing: the request may run again.
local request = KEYS[#KEYS]
local kept = redis.call('get', request)
if kept then
  return cmsgpack.unpack(kept)[1]
end
local now = server_now_ms()
local deadline = tonumber(ARGV[#ARGV - 1])
if now > deadline then
  return refused_late(now, 'the request')
end
local answer = body()
redis.call('set', request, cmsgpack.pack({answer}), 'px', tonumber(ARGV[#ARGV]) - now)
return answer

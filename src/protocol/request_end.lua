end
-- The end of a script run once per request. Its last key is the request's key, its last
-- argument how long that key keeps the answer, in ms.
-- Sent twice: the first run keeps its answer under the request's key, and a second run of
-- the same request (its first answer was lost with its connection) answers it again and
-- changes nothing. An undo (request_undo.lua) leaves a request's key marked undone: a run
-- that comes after it changes nothing and answers nil. A body that fails changes nothing and
-- keeps nothing: the request may run again.
local request = KEYS[#KEYS]
local kept = redis.call('get', request)
if kept then
  return cmsgpack.unpack(kept)[1]
end
local answer = body()
redis.call('set', request, cmsgpack.pack({answer}), 'px', ARGV[#ARGV])
return answer

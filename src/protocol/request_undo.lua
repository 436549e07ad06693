-- The start of every undo of a request (a take whose answer never came): it marks the
-- request's key undone, so that a run of the request that comes later changes nothing, and
-- hands the undo what the request answered, if it ran.
-- Sent twice: a request already undone is left as it is.
-- Its last key is the request's key, its last argument how long that key is kept, in ms.
local UNDONE = cmsgpack.pack({false, 'undone'})
-- The answer the request gave, or nil when it has not run; `undone` true when it was undone
-- before. Marks it undone from now on.
local function undo_request()
  local request = KEYS[#KEYS]
  local kept = redis.call('get', request)
  if kept == UNDONE then
    return nil, true
  end
  redis.call('set', request, UNDONE, 'px', ARGV[#ARGV])
  if kept then
    return cmsgpack.unpack(kept)[1], false
  end
  return nil, false
end

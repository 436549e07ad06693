-- The start of every undo of a request (a take whose answer never came): it marks the
-- request's key undone, so that a run of the request that comes later changes nothing, and
-- hands the undo what the request answered, if it ran.
-- Sent twice: a request already undone is left as it is.
-- Its last key is the request's key; its last two arguments the request's deadline and until
-- when its key is kept, in ms since the epoch on the server's clock. After the deadline no
-- copy of the request runs any more (request_end.lua): an undo that comes later marks nothing.
local UNDONE = cmsgpack.pack({false, 'undone'})
-- The answer the request gave, or nil when it has not run; `undone` true when it was undone
-- before. Marks it undone from now on.
local function undo_request()
  local request = KEYS[#KEYS]
  local kept = redis.call('get', request)
  if kept == UNDONE then
    return nil, true
  end
  -- Marked for the rest of the keeping, and for a millisecond at least when an answer is
  -- kept: a key lives through the millisecond its expiry names, so a second undo in that
  -- same millisecond would find the answer again, and give back what it took twice.
  local keep_for = tonumber(ARGV[#ARGV]) - server_now_ms()
  if keep_for > 0 or kept then
    redis.call('set', request, UNDONE, 'px', math.max(keep_for, 1))
  end
  if kept then
    return cmsgpack.unpack(kept)[1], false
  end
  return nil, false
end

-- The lock's release (shared by the lock's release script and an election's resignation):
-- releases one level of a holder's lock; the last level deletes the key and announces it.
-- KEYS[1]: the lock hash
-- KEYS[2]: the release channel of the lock name
-- KEYS[3]: the latch key of this release request (keeps the answer for a retried request)
-- ARGV[1]: the holder id (unique to one acquisition chain, so a late release of an earlier
--          chain finds nothing of its own in a later one)
-- ARGV[2]: the lease in ms the remaining levels get at least
-- ARGV[3]: until when the latch keeps the answer (ms since the epoch, on the server's clock)
-- ARGV[4]: the release message
-- ARGV[5]: how many levels the holder's process keeps after this release
-- Answers nil when the holder does not hold the lock, 0 when levels remain, 1 when freed.
-- The count is set to the levels the process keeps rather than decremented, so that a level
-- an unanswered acquisition added behind its back cannot keep the lock alive.
local function give_lock()
  local answered = earlier_answer(KEYS[3])
  if answered then
    return answered
  end
  if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return nil
  end
  if tonumber(ARGV[5]) > 0 then
    return keep_levels(ARGV[1], ARGV[5], ARGV[2], KEYS[3])
  end
  redis.call('del', KEYS[1])
  redis.call(publish_command, KEYS[2], ARGV[4])
  redis.call('set', KEYS[3], 1, 'px', latch_ms())
  return 1
end

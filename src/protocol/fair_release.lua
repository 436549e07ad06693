-- Releases one level of a holder's fair lock; the last level deletes the key and wakes the
-- next in line only, on its own channel.
-- KEYS[1]: the lock hash
-- KEYS[2]: the queue of waiters
-- KEYS[3]: when each waiter's place expires
-- KEYS[4]: the latch key of this release request (keeps the answer for a retried request)
-- ARGV[1]: the holder id
-- ARGV[2]: the lease in ms the remaining levels get at least
-- ARGV[3]: how long the latch keeps the answer, in ms
-- ARGV[4]: the release message
-- ARGV[5]: how many levels the holder's process keeps after this release
-- ARGV[6]: the prefix of the waiters' channels ('<prefix>:<holder id>')
-- Answers nil when the holder does not hold the lock, 0 when levels remain, 1 when freed.
-- Runs after fair_queue.lua, which sets `now` and drops expired places at the head.
local answered = earlier_answer(KEYS[4])
if answered then
  return answered
end
local function wake_next()
  local head = redis.call('lindex', KEYS[2], 0)
  if head then
    redis.call(publish_command, ARGV[6] .. ':' .. head, ARGV[4])
  end
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  if redis.call('exists', KEYS[1]) == 0 then
    -- Free: the next in line may have missed its wake.
    wake_next()
  end
  return nil
end
if tonumber(ARGV[5]) > 0 then
  return keep_levels(ARGV[1], ARGV[5], ARGV[2], KEYS[4], ARGV[3])
end
redis.call('del', KEYS[1])
wake_next()
redis.call('set', KEYS[4], 1, 'px', ARGV[3])
return 1

-- Releases one level of a holder's fair lock; the last level hands the lock to the next in
-- line when it accepts a grant (see below), else deletes the key and wakes the next in line
-- only, on its own channel, to ask.
-- KEYS[1]: the lock hash
-- KEYS[2]: the queue of waiters
-- KEYS[3]: when each waiter's place expires
-- KEYS[4]: the latch key of this release request (keeps the answer for a retried request)
-- KEYS[5]: the waiters that accept a grant inside a release (holder id -> lease ms)
-- KEYS[6]: the fencing token counter of the lock name
-- ARGV[1]: the holder id
-- ARGV[2]: the lease in ms the remaining levels get at least
-- ARGV[3]: until when the latch keeps the answer (ms since the epoch, on the server's clock)
-- ARGV[4]: the release message
-- ARGV[5]: how many levels the holder's process keeps after this release
-- ARGV[6]: the prefix of the waiters' channels ('<prefix>:<holder id>')
-- ARGV[7]: how long a place is kept after the place ahead of it expires, in ms
-- Answers nil when the holder does not hold the lock, 0 when levels remain, 1 when released
-- (freed or handed on).
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
  return keep_levels(ARGV[1], ARGV[5], ARGV[2], KEYS[4])
end
-- The next in line, when it accepts a grant, holds the lock from here: its holder id with one
-- level, a fresh fencing token, the lease it asked for but no longer than a place's wait (so a
-- waiter that died meanwhile keeps the lock no longer than it would have kept its place).
-- The message on its channel tells it: 'grant <token> <lease ms> <holder id>'. What can fail
-- (a key of another type) is read before the first write.
local head = redis.call('lindex', KEYS[2], 0)
local lease = head and tonumber(redis.call('hget', KEYS[5], head))
local token = lease and redis.call('incr', KEYS[6])
redis.call('del', KEYS[1])
if lease then
  lease = math.max(1, math.min(lease, tonumber(ARGV[7])))
  leave_head(head, ARGV[7])
  redis.call('hset', KEYS[1], head, 1)
  redis.call('pexpire', KEYS[1], string.format('%d', lease))
  local grant = string.format('grant %d %d %s', token, lease, head)
  redis.call(publish_command, ARGV[6] .. ':' .. head, grant)
else
  wake_next()
end
redis.call('set', KEYS[4], 1, 'px', latch_ms())
return 1

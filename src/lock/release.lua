-- Releases one level of a holder's lock; the last level deletes the key and announces it.
-- KEYS[1]: the lock hash
-- KEYS[2]: the release channel of the lock name
-- KEYS[3]: the latch key of this release request (keeps the answer for a retried request)
-- ARGV[1]: the holder id
-- ARGV[2]: the lease in ms the remaining levels get at least
-- ARGV[3]: how long the latch keeps the answer, in ms
-- ARGV[4]: the release message
-- Answers nil when the holder does not hold the lock, 0 when levels remain, 1 when freed.
local answered = redis.call('get', KEYS[3])
if answered then
  return tonumber(answered)
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return nil
end
local left = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if left > 0 then
  -- The remaining levels keep at least the lease they had.
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  redis.call('set', KEYS[3], 0, 'px', ARGV[3])
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[4])
redis.call('set', KEYS[3], 1, 'px', ARGV[3])
return 1

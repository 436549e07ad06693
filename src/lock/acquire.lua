-- Takes the lock for a holder, or enters it once more when the holder has it already.
-- KEYS[1]: the lock hash (field = holder id, value = reentrancy count)
-- KEYS[2]: the fencing token counter of the lock name
-- ARGV[1]: the lease in milliseconds
-- ARGV[2]: the holder id
-- Answers {1, fencing token} when the holder now holds the lock (a reentrant acquisition
-- answers the token of the first one), or {0, PTTL of the lock in ms} when someone else has it.
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  local token = false
  if count > 1 then
    token = tonumber(redis.call('get', KEYS[2]))
  end
  if not token then
    token = redis.call('incr', KEYS[2])
  end
  return {1, token}
end
return {0, redis.call('pttl', KEYS[1])}

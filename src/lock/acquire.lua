-- Takes the lock for a holder, or enters it once more when the holder has it already.
-- KEYS[1]: the lock hash (field = holder id, value = reentrancy count)
-- KEYS[2]: the fencing token counter of the lock name
-- ARGV[1]: the lease in milliseconds
-- ARGV[2]: the holder id
-- Answers {1, fencing token} when the holder took the lock, {2, token} when it entered it once
-- more (the token is the counter's value, which a multi-server lock may have raised), or
-- {0, PTTL of the lock in ms} when someone else has it.
-- Everything that can fail (INCR or GET on a key of another type) runs before the first write.
if redis.call('exists', KEYS[1]) == 0 then
  local token = redis.call('incr', KEYS[2])
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, token}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local token = tonumber(redis.call('get', KEYS[2])) or redis.call('incr', KEYS[2])
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  -- A reentrant level never shortens the lease the outer levels have.
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  return {2, token}
end
return {0, redis.call('pttl', KEYS[1])}

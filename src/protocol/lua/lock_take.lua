-- The lock's acquisition (the acquire script of the lock, and of an election's campaign):
-- takes the lock for a new acquisition chain, or enters it once more for a chain that has it.
-- KEYS[1]: the lock hash (field = holder id, value = reentrancy count)
-- KEYS[2]: the fencing token counter of the lock name
-- ARGV[1]: the lease in milliseconds
-- ARGV[2]: the holder id (unique to one acquisition chain: a thread's hold from its first level
--          to its last)
-- ARGV[3]: how many levels of the chain the holder's process holds ('0': a new chain)
-- Answers {1, fencing token} when the new chain took the lock (or an earlier send of the
-- same acquisition did), {2, token} when the chain entered it once more (the token is the
-- counter's value, which a multi-server lock may have raised), {0, PTTL of the lock in ms} when someone else has it, or {3, 0} when the chain's
-- hold is gone (expired, deleted or force-released before its holder noticed).
-- Everything that can fail (INCR or GET on a key of another type) runs before the first write.
local function take_lock()
  if ARGV[3] == '0' then
    if redis.call('exists', KEYS[1]) == 0 then
      local token = redis.call('incr', KEYS[2])
      redis.call('hincrby', KEYS[1], ARGV[2], 1)
      redis.call('pexpire', KEYS[1], ARGV[1])
      return {1, token}
    end
    -- The new chain's own id already here can only come from an earlier send of this same
    -- acquisition that ran (its connection broke and it was sent again): it is this one.
    -- (HEXISTS fails with WRONGTYPE when the name is taken by a key that is not a lock.)
    if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
      return taken_before(ARGV[2], ARGV[1], KEYS[2])
    end
    return {0, redis.call('pttl', KEYS[1])}
  end
  if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return {3, 0}
  end
  return enter_again(ARGV[2], ARGV[1], KEYS[2], ARGV[3])
end

-- Takes a read lock of a read-write lock for a new chain, or enters it once more. Readers
-- share the lock; the writer may take read levels too (with the holder id of its write
-- chain), and keeps the mode 'write' meanwhile.
-- KEYS[1]: the read-write lock hash
-- KEYS[2]: the fencing token counter of the lock name
-- ARGV[1]: the lease in milliseconds
-- ARGV[2]: the reader's field (its holder id)
-- ARGV[3]: how many levels of the chain the holder's process holds ('0': a new chain)
-- ARGV[4]: the prefix of the reader's timeout keys: level n has '<prefix>:<n>', whose TTL is
--          that level's lease
-- Answers as the lock's acquire script: {1, token}, {2, token}, {0, PTTL} or {3, 0}.
local mode = redis.call('hget', KEYS[1], 'mode')
local lease = tonumber(ARGV[1])
-- Sets the lease of level n, and makes the hash live at least as long.
local function lease_level(level)
  redis.call('set', ARGV[4] .. ':' .. level, 1, 'px', lease)
  if redis.call('pttl', KEYS[1]) < lease then
    redis.call('pexpire', KEYS[1], lease)
  end
end
if ARGV[3] == '0' then
  if not mode or mode == 'read'
      or redis.call('hexists', KEYS[1], ARGV[2] .. ':write') == 1 then
    local held = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
    if held then
      -- An earlier send of this same acquisition ran (its connection broke): it is this one.
      for level = 2, held do
        redis.call('del', ARGV[4] .. ':' .. level)
      end
      redis.call('hset', KEYS[1], ARGV[2], 1)
      lease_level(1)
      return {1, current_token(KEYS[2])}
    end
    local taken = redis.call('incr', KEYS[2])
    if not mode then
      redis.call('hset', KEYS[1], 'mode', 'read')
    end
    lease_level(redis.call('hincrby', KEYS[1], ARGV[2], 1))
    return {1, taken}
  end
  return {0, redis.call('pttl', KEYS[1])}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return {3, 0}
end
local current = current_token(KEYS[2])
lease_level(redis.call('hincrby', KEYS[1], ARGV[2], 1))
return {2, current}

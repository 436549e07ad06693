-- Helpers of the acquire scripts of a read-write lock's readers (the read lock, the upgradable
-- read), whose hash is KEYS[1] and fencing token counter KEYS[2].

-- Sets the lease of the reader level whose timeout key is `level_key`, and makes the hash
-- live at least as long.
local function lease_read_level(level_key, lease)
  redis.call('set', level_key, 1, 'px', lease)
  if redis.call('pttl', KEYS[1]) < lease then
    redis.call('pexpire', KEYS[1], lease)
  end
end

-- The reader `field` (level n's timeout key '<prefix>:<n>') starts a chain ('0' levels held)
-- when `may_start`, or enters its chain once more. `mode` is the hash's mode now. Answers as
-- the lock's acquire script: {1, token}, {2, token}, {0, PTTL} or {3, 0}.
local function enter_reading(mode, may_start, field, levels_held, prefix, lease)
  if levels_held == '0' then
    if not may_start then
      return {0, redis.call('pttl', KEYS[1])}
    end
    local held = tonumber(redis.call('hget', KEYS[1], field))
    if held then
      -- An earlier send of this same acquisition ran (its connection broke): it is this one.
      for level = 2, held do
        redis.call('del', prefix .. ':' .. level)
      end
      redis.call('hset', KEYS[1], field, 1)
      lease_read_level(prefix .. ':1', lease)
      return {1, current_token(KEYS[2])}
    end
    local taken = redis.call('incr', KEYS[2])
    if not mode then
      redis.call('hset', KEYS[1], 'mode', 'read')
    end
    lease_read_level(prefix .. ':' .. redis.call('hincrby', KEYS[1], field, 1), lease)
    return {1, taken}
  end
  if redis.call('hexists', KEYS[1], field) == 0 then
    return {3, 0}
  end
  -- One more than the levels held, set rather than incremented: a repeat of the same try
  -- adds no second level.
  local current = current_token(KEYS[2])
  local level = tonumber(levels_held) + 1
  redis.call('hset', KEYS[1], field, level)
  lease_read_level(prefix .. ':' .. level, lease)
  return {2, current}
end

-- Whether a new reader chain may start in `mode`: readers share the lock, and the thread that
-- holds the write lock (by the field `writer`; '': the reader's thread does not) may read
-- beside it, by a chain of its own.
local function readers_may_enter(mode, writer)
  return not mode or mode == 'read'
    or (writer ~= '' and redis.call('hexists', KEYS[1], writer) == 1)
end

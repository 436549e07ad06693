-- Takes the upgradable read of a read-write lock for a new chain, or enters it once more. It
-- is a reader's hold (the field '<holder id>' and its levels' timeout keys, as Redisson's
-- readers have), shared with the other readers and excluding writers as theirs do; the
-- hash's field 'upgrader' names its holder, and keeps out a second upgradable reader while
-- that holder lives (some level of it has not run out).
-- KEYS[1]: the read-write lock hash
-- KEYS[2]: the fencing token counter of the lock name
-- ARGV[1]..ARGV[4]: as the read lock's acquire script
-- ARGV[5]: the prefix of the lock's derived keys ('{name}:'): reader r's level n has the
--          timeout key '<prefix><r>:rwlock_timeout:<n>'
-- ARGV[6]: as the read lock's ARGV[5]: the write lock's field of the reader's thread, if any
-- Answers as the lock's acquire script: {1, token}, {2, token}, {0, PTTL} or {3, 0}.
local mode = redis.call('hget', KEYS[1], 'mode')
local upgrader = redis.call('hget', KEYS[1], 'upgrader')
local may_start = readers_may_enter(mode, ARGV[6])
if ARGV[3] == '0' and upgrader and upgrader ~= ARGV[2] then
  local left = reader_level_left(ARGV[5], upgrader)
  if left > 0 then
    -- Another upgradable reader lives: until its release wakes this one, or its levels end.
    return {0, left}
  end
end
local answer = enter_reading(mode, may_start, ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[1]))
if answer[1] == 1 then
  redis.call('hset', KEYS[1], 'upgrader', ARGV[2])
end
return answer

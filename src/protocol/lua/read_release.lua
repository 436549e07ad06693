-- Releases one level of a read lock (or of the upgradable read) of a read-write lock. When
-- the last reader leaves (and no writer holds read levels), the lock is deleted and one
-- waiter woken (message '0': a writer may enter).
-- KEYS[1]: the read-write lock hash
-- KEYS[2]: the channel of the read-write lock
-- KEYS[3]: the latch key of this release request
-- ARGV[1]: the reader's field (its holder id)
-- ARGV[2]: the lease in ms the remaining levels get at least
-- ARGV[3]: until when the latch keeps the answer (ms since the epoch, on the server's clock)
-- ARGV[4]: the release message
-- ARGV[5]: how many levels the holder's process keeps after this release
-- ARGV[6]: the prefix of the lock's derived keys ('{name}:'): reader r's level n has the
--          timeout key '<prefix><r>:rwlock_timeout:<n>'
-- ARGV[7]: the message that wakes every waiter, published when a chain leaves while the
--          lock has an upgradable reader (or had: this one) and other readers stay
-- The upgradable reader's chain ending takes its 'upgrader' field with it.
-- Answers nil when the holder does not hold a read lock, 0 when the lock stays held (by
-- this holder's remaining levels or by others), 1 when it was freed.
local answered = earlier_answer(KEYS[3])
if answered then
  return answered
end
local held = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not held then
  return nil
end
local left = tonumber(ARGV[5])
local function level_key(reader, level)
  return ARGV[6] .. reader .. ':rwlock_timeout:' .. level
end
for level = left + 1, held do
  redis.call('del', level_key(ARGV[1], level))
end
if left > 0 then
  redis.call('hset', KEYS[1], ARGV[1], left)
  for level = 1, left do
    if redis.call('pttl', level_key(ARGV[1], level)) < tonumber(ARGV[2]) then
      redis.call('pexpire', level_key(ARGV[1], level), ARGV[2])
    end
  end
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  end
  redis.call('set', KEYS[3], 0, 'px', latch_ms())
  return 0
end
redis.call('hdel', KEYS[1], ARGV[1])
local upgrader = redis.call('hget', KEYS[1], 'upgrader')
if upgrader == ARGV[1] then
  redis.call('hdel', KEYS[1], 'upgrader')
end
local mode = redis.call('hget', KEYS[1], 'mode')
if redis.call('hlen', KEYS[1]) > 1 then
  if mode == 'write' then
    redis.call('set', KEYS[3], 0, 'px', latch_ms())
    return 0
  end
  -- Other readers: the lock lives as long as their longest level.
  local longest = longest_read_level(ARGV[6])
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    if upgrader then
      -- The upgradable reader may now upgrade, or another take its place: wake them all.
      redis.call(publish_command, KEYS[2], ARGV[7])
    end
    redis.call('set', KEYS[3], 0, 'px', latch_ms())
    return 0
  end
end
redis.call('del', KEYS[1])
redis.call(publish_command, KEYS[2], ARGV[4])
redis.call('set', KEYS[3], 1, 'px', latch_ms())
return 1

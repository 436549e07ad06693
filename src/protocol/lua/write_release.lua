-- Releases one level of the write lock of a read-write lock. The last level frees the lock,
-- or, when the writer holds read levels still, hands it to readers; either way every waiter
-- is woken (message '1'): readers may all enter. When the writer holds nothing else and
-- ARGV[7] names a writer of its process that waits, the last level hands the write lock to
-- that writer instead.
-- KEYS[1]: the read-write lock hash
-- KEYS[2]: the channel of the read-write lock
-- KEYS[3]: the latch key of this release request
-- KEYS[4]: the fencing token counter of the lock name
-- ARGV[1]: the writer's field ('<holder id>:write')
-- ARGV[2]: the lease in ms the remaining levels get at least
-- ARGV[3]: until when the latch keeps the answer (ms since the epoch, on the server's clock)
-- ARGV[4]: the message that wakes every waiter
-- ARGV[5]: how many levels the holder's process keeps after this release
-- ARGV[6]: the prefix of the lock's derived keys ('{name}:'): reader r's level n has the
--          timeout key '<prefix><r>:rwlock_timeout:<n>'
-- ARGV[7]: the writer's field of the chain to hand the write lock to ('': none)
-- ARGV[8]: the lease that chain asked for, in ms
-- ARGV[9]: for an upgrade's write lock, the id of the try whose grant is released ('':
--          not an upgrade); a copy of the release that comes after the chain upgraded again
--          (the field 'upgrading' names a later try) frees nothing
-- When the writer keeps read levels, the lock then lives as long as the longest of them.
-- Answers nil when the holder does not hold the write lock (or, for an upgrade, that
-- grant), 0 when levels remain, 1 when released, {2, fencing token} when handed on.
local function release_write()
  local answered = earlier_answer(KEYS[3])
  if answered then
    return answered
  end
  if redis.call('hget', KEYS[1], 'mode') ~= 'write'
      or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return nil
  end
  if ARGV[9] ~= '' and redis.call('hget', KEYS[1], 'upgrading') ~= 'try:' .. ARGV[9] then
    -- The grant this release is for is gone: a later upgrade of the chain holds the write
    -- lock now (this copy came late, after its holder upgraded again).
    return nil
  end
  if tonumber(ARGV[5]) > 0 then
    return keep_levels(ARGV[1], ARGV[5], ARGV[2], KEYS[3])
  end
  if ARGV[7] ~= '' and redis.call('hlen', KEYS[1]) == 2 then
    -- The writer holds nothing but its write lock ('mode' and its field): hand it on.
    return hand_over(ARGV[1], ARGV[7], ARGV[8], KEYS[4], KEYS[3])
  end
  redis.call('hdel', KEYS[1], ARGV[1], 'upgrading')
  if redis.call('hlen', KEYS[1]) == 1 then
    redis.call('del', KEYS[1])
  else
    redis.call('hset', KEYS[1], 'mode', 'read')
    local longest = longest_read_level(ARGV[6])
    if longest > 0 then
      redis.call('pexpire', KEYS[1], longest)
    end
  end
  redis.call(publish_command, KEYS[2], ARGV[4])
  redis.call('set', KEYS[3], 1, 'px', latch_ms())
  return 1
end

return release_write()

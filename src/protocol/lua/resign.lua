-- A leader's release in an election: releases a level as the lock's release script does
-- (lock_give.lua: KEYS[1] to KEYS[3], ARGV[1] to ARGV[5], and its answers); the last level
-- of the leader on record is its resignation: logged, announced, and its record deleted.
-- KEYS[4]: the leader record
-- KEYS[5]: the change log
-- KEYS[6]: the election's channel
-- ARGV[6]: how many changes the log keeps, about
local answer = give_lock()
if answer == 1 and redis.call('hget', KEYS[4], 'holder') == ARGV[1] then
  local leader = redis.call('hmget', KEYS[4], 'value', 'term', 'since')
  redis.call('xadd', KEYS[5], 'MAXLEN', '~', ARGV[6], '*', 'change', 'resigned',
    'holder', ARGV[1], 'value', leader[1], 'term', leader[2], 'since', leader[3])
  redis.call('del', KEYS[4])
  redis.call(publish_command, KEYS[6], leader[2])
end
return answer

-- Frees the lock whoever holds it, tells its holders, and wakes its waiters.
-- KEYS[1]: the lock hash
-- KEYS[2]: the release channel of the lock name
-- KEYS[3]: the fencing token counter of the lock name
-- ARGV[1]: the release message
-- ARGV[2]: the channel of force-release notices
-- Answers 1 when a lock was freed, 0 when there was none.
-- Each holder gets one notice '<fencing token> <holder id> <lock name>', so that a manager
-- holding the lock learns at once that it lost it. The notices go out before the release
-- message, so a holder hears of its loss before its own waiters can take the lock. A notice
-- the server refuses (an ACL without the channel) is skipped: the holder then learns at its
-- next renewal. Everything that can fail runs before the one write, the delete.
if redis.call('exists', KEYS[1]) == 0 then
  return 0
end
local holders = redis.call('hkeys', KEYS[1])
local token = redis.call('get', KEYS[3]) or '0'
for _, holder in ipairs(holders) do
  redis.pcall('publish', ARGV[2], token .. ' ' .. holder .. ' ' .. KEYS[1])
end
redis.call(publish_command, KEYS[2], ARGV[1])
redis.call('del', KEYS[1])
return 1

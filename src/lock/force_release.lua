-- Frees the lock whoever holds it, wakes its waiters, and tells its holders.
-- KEYS[1]: the lock hash
-- KEYS[2]: the release channel of the lock name
-- KEYS[3]: the fencing token counter of the lock name
-- ARGV[1]: the release message
-- ARGV[2]: the channel of force-release notices
-- Answers 1 when a lock was freed, 0 when there was none.
-- Each holder gets one notice '<fencing token> <holder id> <lock name>', so that a manager
-- holding the lock learns at once that it lost it. Reads that can fail (a key of another
-- type) run before the first write.
local holders = redis.call('hkeys', KEYS[1])
local token = redis.call('get', KEYS[3]) or '0'
if redis.call('del', KEYS[1]) == 0 then
  return 0
end
redis.call('publish', KEYS[2], ARGV[1])
for _, holder in ipairs(holders) do
  redis.call('publish', ARGV[2], token .. ' ' .. holder .. ' ' .. KEYS[1])
end
return 1

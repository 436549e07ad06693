-- Frees a fair lock whoever holds it, tells its holders, and wakes the next in line.
-- KEYS[1]: the lock hash
-- KEYS[2]: the queue of waiters
-- KEYS[3]: the fencing token counter of the lock name
-- ARGV[1]: the release message
-- ARGV[2]: the channel of force-release notices
-- ARGV[3]: the prefix of the waiters' channels
-- Answers 1 when a lock was freed, 0 when there was none. Notices as for the lock's force
-- release: '<fencing token> <holder id> <lock name>', before the wake.
if redis.call('exists', KEYS[1]) == 0 then
  return 0
end
local holders = redis.call('hkeys', KEYS[1])
local token = redis.call('get', KEYS[3]) or '0'
local head = redis.call('lindex', KEYS[2], 0)
for _, holder in ipairs(holders) do
  redis.pcall('publish', ARGV[2], token .. ' ' .. holder .. ' ' .. KEYS[1])
end
redis.call('del', KEYS[1])
if head then
  redis.call(publish_command, ARGV[3] .. ':' .. head, ARGV[1])
end
return 1

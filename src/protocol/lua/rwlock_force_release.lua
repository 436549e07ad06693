-- Frees a read-write lock whoever holds it, readers and writer, tells its holders, and wakes
-- every waiter.
-- KEYS[1]: the read-write lock hash
-- KEYS[2]: the channel of the read-write lock
-- KEYS[3]: the fencing token counter of the lock name
-- ARGV[1]: the message that wakes every waiter
-- ARGV[2]: the channel of force-release notices
-- Answers 1 when a lock was freed, 0 when there was none. One notice per holder,
-- '<fencing token> <holder id> <lock name>' (the writer's field without ':write'). The
-- readers' timeout keys are left to expire.
if redis.call('exists', KEYS[1]) == 0 then
  return 0
end
local fields = redis.call('hkeys', KEYS[1])
local token = redis.call('get', KEYS[3]) or '0'
for _, field in ipairs(fields) do
  if tonumber(redis.call('hget', KEYS[1], field)) then
    local holder = string.gsub(field, ':write$', '')
    redis.pcall('publish', ARGV[2], token .. ' ' .. holder .. ' ' .. KEYS[1])
  end
end
redis.call('del', KEYS[1])
redis.call(publish_command, KEYS[2], ARGV[1])
return 1

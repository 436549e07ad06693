-- Takes back what a read, upgradable or write acquisition may have added whose answer never
-- reached the holder: levels beyond those its process knows it holds, with their timeout
-- keys.
-- KEYS[1]: the read-write lock hash
-- KEYS[2]: the channel of the read-write lock
-- ARGV[1]: the holder's field (a reader's holder id, or '<holder id>:write')
-- ARGV[2]: how many levels of the lock the holder's process holds
-- ARGV[3]: the prefix of the holder's timeout keys ('' for the writer, which has none)
-- ARGV[4]: the message that wakes every waiter
-- ARGV[5]: for an upgrade's try, its id ('' otherwise): only that try's grant is taken back
-- Answers 1 when it freed the lock, else 0. A key of another type is left alone. When the
-- lock stays with an upgradable reader, every waiter is woken (an upgrade may be waiting for
-- the reader taken back).
local count = tonumber(redis.pcall('hget', KEYS[1], ARGV[1]))
if not count then
  return 0
end
if ARGV[5] ~= '' and redis.call('hget', KEYS[1], 'upgrading') ~= 'try:' .. ARGV[5] then
  return 0
end
local kept = tonumber(ARGV[2])
if ARGV[3] ~= '' then
  for level = kept + 1, count do
    redis.call('del', ARGV[3] .. ':' .. level)
  end
end
if kept > 0 then
  if count > kept then
    redis.call('hset', KEYS[1], ARGV[1], kept)
  end
  return 0
end
if ARGV[3] == '' then
  redis.call('hdel', KEYS[1], ARGV[1], 'upgrading')
else
  redis.call('hdel', KEYS[1], ARGV[1])
end
local upgrader = redis.call('hget', KEYS[1], 'upgrader')
if upgrader == ARGV[1] then
  redis.call('hdel', KEYS[1], 'upgrader')
end
if redis.call('hlen', KEYS[1]) <= 1 then
  redis.call('del', KEYS[1])
  redis.call(publish_command, KEYS[2], ARGV[4])
  return 1
end
if ARGV[3] == '' then
  -- The writer's own read levels remain.
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call(publish_command, KEYS[2], ARGV[4])
elseif upgrader then
  redis.call(publish_command, KEYS[2], ARGV[4])
end
return 0

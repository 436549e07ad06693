-- Deletes a count-down latch (which opens it) and announces it, as a new count is announced.
-- KEYS[1]: the latch (a string holding its count; absent when open)
-- KEYS[2]: the latch's channel
-- ARGV[1]: the new-count message
-- Answers 1 when a count was deleted, 0 when the latch was open already; an error starting
-- with WRONGTYPE, and nothing deleted, when the key holds something other than a count.
local value = redis.pcall('get', KEYS[1])
if type(value) == 'table' or (value and not string.match(value, '^%-?%d+$')) then
  return redis.error_reply('WRONGTYPE the key holds no count-down latch')
end
if not value then
  return 0
end
redis.call('del', KEYS[1])
redis.call(publish_command, KEYS[2], ARGV[1])
return 1

-- Gives a count-down latch its count, unless it has one, and announces the new count.
-- KEYS[1]: the latch (a string holding its count; absent when open)
-- KEYS[2]: the latch's channel
-- ARGV[1]: the count (at least 1)
-- ARGV[2]: the new-count message
-- Answers 1 when the count was set, 0 when the latch has a count already; an error starting
-- with WRONGTYPE when the key holds something other than a count (it belongs to someone else).
local value = redis.pcall('get', KEYS[1])
if type(value) == 'table' or (value and not string.match(value, '^%-?%d+$')) then
  return redis.error_reply('WRONGTYPE the key holds no count-down latch')
end
if value then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call(publish_command, KEYS[2], ARGV[2])
return 1

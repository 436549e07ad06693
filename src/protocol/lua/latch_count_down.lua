-- Counts a count-down latch down by one; the step to zero deletes the key (an absent key is
-- an open latch) and announces that the latch opened.
-- KEYS[1]: the latch (a string holding its count; absent when open)
-- KEYS[2]: the latch's channel
-- ARGV[1]: the opened message
-- Answers the count left (0 when open). An open latch stays open and nothing is announced:
-- DECR makes its key -1, which is deleted at once. An error starting with WRONGTYPE when the
-- key holds something other than a count.
local left = redis.pcall('decr', KEYS[1])
if type(left) == 'table' then
  -- DECR refused: the key is of another type, or a string that is no integer.
  return redis.error_reply('WRONGTYPE the key holds no count-down latch')
end
if left > 0 then
  return left
end
redis.call('del', KEYS[1])
if left == 0 then
  redis.call(publish_command, KEYS[2], ARGV[1])
end
return 0

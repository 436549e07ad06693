-- Adds permits to a semaphore (a release, or a change of its size) and announces the new count
-- to waiters.
-- KEYS[1]: the semaphore
-- KEYS[2]: its channel
-- ARGV[1]: the change (negative takes permits away)
-- Answers {1, new count}, or {0, count} and changes nothing when the change would take the
-- count below zero or above the largest count kept.
local change = tonumber(ARGV[1])
local count = read_count(KEYS[1]) or 0
local new = count + change
if new > MAX_COUNT or (change < 0 and new < 0) then
  return {0, count}
end
-- INCRBY rather than SET: an expiry someone gave the key stays.
redis.call('incrby', KEYS[1], ARGV[1])
if change > 0 and new > 0 then
  redis.call(publish_command, KEYS[2], text(new))
end
return {1, new}

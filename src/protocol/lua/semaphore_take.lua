-- Takes permits of a semaphore when enough are available.
-- KEYS[1]: the semaphore
-- ARGV[1]: how many permits (at least 1)
-- Answers 1 when they were taken, 0 when fewer are available.
local available = read_count(KEYS[1])
if available and available >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  return 1
end
return 0

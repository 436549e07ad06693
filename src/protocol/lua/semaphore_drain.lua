-- Takes every available permit of a semaphore.
-- KEYS[1]: the semaphore
-- Answers how many it took (0 when none were available).
local count = read_count(KEYS[1])
if not count or count <= 0 then
  return 0
end
redis.call('decrby', KEYS[1], text(count))
return count

-- Gives one permit of a permit-expirable semaphore back by its id (after semaphore_count.lua
-- and permit_reclaim.lua, whose KEYS these are), and announces the new count to waiters.
-- ARGV[1]: the permit's id (16 raw bytes)
-- Answers 1 when the permit was taken and is given back; 0 when no permit with this id is
-- taken: it was given back before, by its holder or because its lease ran out.
read_count(KEYS[1])
if redis.call('zrem', KEYS[3], ARGV[1]) == 0 then
  return 0
end
local count = redis.call('incrby', KEYS[1], 1)
if count > 0 then
  redis.call(publish_command, KEYS[2], text(count))
end
return 1

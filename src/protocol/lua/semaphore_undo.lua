-- Undoes a take of semaphore permits whose answer never came (after semaphore_count.lua and
-- request_undo.lua): the permits it took, if it ran, are given back and announced.
-- KEYS[1]: the semaphore
-- KEYS[2]: its channel
-- KEYS[3]: the take's request key
-- ARGV[1]: how many permits the take asked for
-- ARGV[2], ARGV[3]: the take's deadline and until when its request key is kept
-- Answers 1 when permits were given back, 0 when the take had not taken any.
read_count(KEYS[1])
local answer = undo_request()
if answer ~= 1 then
  return 0
end
local count = redis.call('incrby', KEYS[1], ARGV[1])
if count > 0 then
  redis.call(publish_command, KEYS[2], text(count))
end
return 1

-- Sets the number of permits of a semaphore that does not exist yet, and announces it.
-- KEYS[1]: the semaphore
-- KEYS[2]: its channel
-- ARGV[1]: the number of permits
-- Answers 1 when it was set, 0 when the semaphore existed (nothing changed).
if read_count(KEYS[1]) then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call(publish_command, KEYS[2], ARGV[1])
return 1

-- Frees the lock whoever holds it, and announces the release when there was one.
-- KEYS[1]: the lock hash
-- KEYS[2]: the release channel of the lock name
-- ARGV[1]: the release message
-- Answers 1 when a lock was freed, 0 when there was none.
if redis.call('del', KEYS[1]) == 1 then
  redis.call('publish', KEYS[2], ARGV[1])
  return 1
end
return 0

-- Raises a lock name's fencing token counter to a token handed out by a multi-server lock,
-- while the holder still holds the lock on this server.
-- KEYS[1]: the lock hash
-- KEYS[2]: the fencing token counter of the lock name
-- ARGV[1]: the holder id
-- ARGV[2]: the token, in decimal without leading zeros
-- Answers 1 when the counter is now at least the token, 0 when the holder is gone.
-- Tokens are compared as decimal strings (shorter is smaller), exact beyond 2^53.
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
local current = redis.call('get', KEYS[2]) or '0'
if #current < #ARGV[2] or (#current == #ARGV[2] and current < ARGV[2]) then
  redis.call('set', KEYS[2], ARGV[2])
end
return 1

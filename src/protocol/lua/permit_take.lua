-- Takes one permit of a permit-expirable semaphore under a new id, with a lease (after
-- semaphore_count.lua and permit_reclaim.lua, whose KEYS these are).
-- ARGV[1]: the new permit's id (16 raw bytes)
-- ARGV[2]: its lease in ms
-- Answers {1, 0} when taken; else {0, ms until the first lease of a permit taken runs out}, or
-- {0, -1} when no permit taken has a lease.
-- Taking a permit copies the count's expiry, when it has one, onto the zset (as Redisson's
-- acquire does): the zset then expires with the count instead of outliving it and giving its
-- permits back to a count set anew. A count without expiry leaves the zset's as it is.
local available = read_count(KEYS[1])
if available and available >= 1 then
  redis.call('decrby', KEYS[1], 1)
  redis.call('zadd', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    redis.call('pexpire', KEYS[3], ttl)
  end
  return {1, 0}
end
local first = redis.call('zrange', KEYS[3], 0, 0, 'WITHSCORES')
if first[2] and tonumber(first[2]) < NO_EXPIRY then
  return {0, math.max(1, tonumber(first[2]) - now)}
end
return {0, -1}

-- The start of every script of a permit-expirable semaphore that reads or takes permits, after
-- semaphore_count.lua: gives the permits whose lease ran out back to the count, and announces
-- the new count to waiters. Time is the server's, so redlease clients' clocks do not matter
-- (Redisson's scripts use the Java client's clock).
-- KEYS[1]: the semaphore (the number of permits available)
-- KEYS[2]: its channel
-- KEYS[3]: the zset of permits taken: permit id (16 raw bytes) -> end of lease, epoch ms
-- Defines `now` (epoch ms) and NO_EXPIRY for the rest of the script.
-- Redisson's score for a permit without lease; such a permit never runs out.
local NO_EXPIRY = 922337203685477
-- Bounds one script's work; the rest are given back by the next script.
local RECLAIM_AT_MOST = 1000
local now = server_now_ms()
local expired = redis.call('zrangebyscore', KEYS[3], 0, now, 'LIMIT', 0, RECLAIM_AT_MOST)
if #expired > 0 then
  read_count(KEYS[1])
  redis.call('zrem', KEYS[3], unpack(expired))
  local count = redis.call('incrby', KEYS[1], #expired)
  if count > 0 then
    redis.call(publish_command, KEYS[2], text(count))
  end
end

-- The start of every fair-lock script that takes or releases the lock: the server's time,
-- and the places at the head of the queue whose waiter stopped asking (or that lost their
-- expiry) dropped.
-- KEYS[2]: the queue of waiters (a list of holder ids, head first)
-- KEYS[3]: when each waiter's place in the queue expires (a zset, epoch ms of the server)
-- KEYS[5]: the waiters that accept a grant inside a release (a hash, holder id -> lease ms)
local now = server_now_ms()
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if not head then
    break
  end
  local expiry = redis.call('zscore', KEYS[3], head)
  if expiry and tonumber(expiry) > now then
    break
  end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], head)
  redis.call('hdel', KEYS[5], head)
end

-- Takes `holder`, whose turn it is, out of the queue (at its head, if it has a place): every
-- place still queued is shortened by one place's wait (`place_ms`), as the queue moved up.
local function leave_head(holder, place_ms)
  if redis.call('lindex', KEYS[2], 0) == holder then
    redis.call('lpop', KEYS[2])
  end
  redis.call('zrem', KEYS[3], holder)
  redis.call('hdel', KEYS[5], holder)
  local shorter = -tonumber(place_ms)
  for _, waiter in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
    redis.call('zincrby', KEYS[3], shorter, waiter)
  end
end

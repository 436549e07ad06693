-- The start of every fair-lock script that takes or releases the lock: the server's time,
-- and the places at the head of the queue whose waiter stopped asking (or that lost their
-- expiry) dropped.
-- KEYS[2]: the queue of waiters (a list of holder ids, head first)
-- KEYS[3]: when each waiter's place in the queue expires (a zset, epoch ms of the server)
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
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
end


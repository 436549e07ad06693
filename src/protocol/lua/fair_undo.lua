-- Takes back what a fair-lock acquisition may have added whose answer never reached the
-- holder, or the place of a waiter that gives up: its place in the queue (the places behind
-- it move up by its wait) and any level beyond those its process knows it holds.
-- KEYS[1]: the lock hash
-- KEYS[2]: the queue of waiters
-- KEYS[3]: when each waiter's place expires
-- KEYS[4]: the waiters that accept a grant inside a release
-- ARGV[1]: the holder id
-- ARGV[2]: how many levels of the lock the holder's process holds
-- ARGV[3]: the release message
-- ARGV[4]: the prefix of the waiters' channels
-- ARGV[5]: the wait of a place, in ms
-- Answers 1 when it freed the lock, else 0. A key of another type is left alone.
local queue = redis.pcall('lrange', KEYS[2], 0, -1)
if type(queue) == 'table' then
  local behind = false
  local shorter = -tonumber(ARGV[5])
  for _, waiter in ipairs(queue) do
    if behind then
      redis.call('zincrby', KEYS[3], shorter, waiter)
    elseif waiter == ARGV[1] then
      behind = true
    end
  end
  if behind then
    redis.call('lrem', KEYS[2], 0, ARGV[1])
  end
  redis.pcall('zrem', KEYS[3], ARGV[1])
  redis.pcall('hdel', KEYS[4], ARGV[1])
end
local function wake_next()
  local head = redis.pcall('lindex', KEYS[2], 0)
  if type(head) == 'string' then
    redis.call(publish_command, ARGV[4] .. ':' .. head, ARGV[3])
  end
end
local count = redis.pcall('hget', KEYS[1], ARGV[1])
if type(count) ~= 'string' then
  if redis.call('exists', KEYS[1]) == 0 then
    -- The lock is free: whoever is at the head now may be asleep behind the place removed.
    wake_next()
  end
  return 0
end
local kept = tonumber(ARGV[2])
if kept > 0 then
  if tonumber(count) > kept then
    redis.call('hset', KEYS[1], ARGV[1], kept)
  end
  return 0
end
redis.call('del', KEYS[1])
wake_next()
return 1

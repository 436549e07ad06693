-- Takes a fair lock in queue order, enters it once more, or queues the caller.
-- KEYS[1]: the lock hash (field = holder id, value = reentrancy count)
-- KEYS[2]: the queue of waiters (a list of holder ids, head first)
-- KEYS[3]: when each waiter's place in the queue expires (a zset, epoch ms of the server)
-- KEYS[4]: the fencing token counter of the lock name
-- KEYS[5]: the waiters that accept a grant inside a release (holder id -> lease ms)
-- ARGV[1]: the lease in milliseconds
-- ARGV[2]: the holder id (unique to one acquisition chain)
-- ARGV[3]: how many levels of the chain the holder's process holds ('0': a new chain)
-- ARGV[4]: how long a place is kept after the place ahead of it expires, in ms
-- ARGV[5]: '1' when the waiter accepts a grant inside a release (the lease it is given is
--          ARGV[1], at most ARGV[4]), else '0'
-- Answers as the lock's acquire script: {1, token} taken, {2, token} entered once more,
-- {0, ms to wait at most, the fencing token counter now} queued behind others (a grant made
-- later draws a larger token), {3, 0} the chain's hold is gone.
-- Places whose waiter stopped asking (it died), or that lost their expiry, are dropped from
-- the head; an acquisition shortens every place still queued by its own wait, as the queue
-- moved up by one. Unlike Redisson, a waiter that asks again keeps its place alive: it is
-- pushed back to at least ARGV[4] per place up to its own after the wait it is told, so only
-- waiters that stopped asking expire, however long the holds ahead of them last.
-- Runs after fair_queue.lua, which sets `now` and drops expired places at the head.

if ARGV[3] ~= '0' then
  if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return {3, 0}
  end
  return enter_again(ARGV[2], ARGV[1], KEYS[4], ARGV[3])
end

if redis.call('exists', KEYS[1]) == 0 then
  local head = redis.call('lindex', KEYS[2], 0)
  if not head or head == ARGV[2] then
    local taken = redis.call('incr', KEYS[4])
    leave_head(ARGV[2], ARGV[4])
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, taken}
  end
elseif redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  return taken_before(ARGV[2], ARGV[1], KEYS[4])
end

-- Not our turn. Wait until the lock's lease ends, or, while it is free, until the place of
-- the waiter at the head expires, but no longer than a lease: should the head take the lock
-- and its hold end without a release (its holder died), we look again. A release wakes us
-- before.
local function wait_hint()
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    return ttl
  end
  local head = redis.call('lindex', KEYS[2], 0)
  local expiry = head and redis.call('zscore', KEYS[3], head)
  if expiry then
    return math.max(1, math.min(tonumber(expiry) - now, tonumber(ARGV[1])))
  end
  return 1
end

-- A waiter that accepts grants says so with every try, for as long as its place lasts (the
-- hash outlives every place it lists, up to 2^40 ms: a place set by hand may be endless). One
-- that no longer does (its writes wait for replicas now) is taken off.
local function accept_grants(expiry)
  if ARGV[5] ~= '1' then
    redis.call('hdel', KEYS[5], ARGV[2])
    return
  end
  redis.call('hset', KEYS[5], ARGV[2], ARGV[1])
  local left = math.max(1, math.min(math.floor(expiry - now), 2 ^ 40))
  if redis.call('pttl', KEYS[5]) < left then
    redis.call('pexpire', KEYS[5], string.format('%.0f', left))
  end
end

local counter = tonumber(redis.call('get', KEYS[4])) or 0
local place = redis.call('zscore', KEYS[3], ARGV[2])
if place then
  local hint = wait_hint()
  local queue = redis.call('lrange', KEYS[2], 0, -1)
  for position, waiter in ipairs(queue) do
    if waiter == ARGV[2] then
      local kept = now + hint + position * tonumber(ARGV[4])
      if kept > tonumber(place) then
        redis.call('zadd', KEYS[3], kept, ARGV[2])
      end
      accept_grants(math.max(kept, tonumber(place)))
      break
    end
  end
  return {0, hint, counter}
end
-- Join the queue: the place expires ARGV[4] after the one ahead (or after the lock's lease).
local last = redis.call('lindex', KEYS[2], -1)
local last_expiry = last and redis.call('zscore', KEYS[3], last)
local ahead_ends
if last_expiry then
  ahead_ends = tonumber(last_expiry)
else
  ahead_ends = now + math.max(0, redis.call('pttl', KEYS[1]))
end
if redis.call('zadd', KEYS[3], ahead_ends + tonumber(ARGV[4]), ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2])
end
accept_grants(ahead_ends + tonumber(ARGV[4]))
return {0, wait_hint(), counter}

-- Helpers of the release scripts of the reentrant locks (lock, fair lock, write and read
-- locks), whose hash is KEYS[1]. Their last argument is the release's deadline (ms since the
-- epoch, on the server's clock), before which every copy of it is sent, and ARGV[3] until
-- when (after the deadline, on the same clock) its latch key keeps its answer.

-- How long the latch key keeps a release's answer from now, in ms.
local function latch_ms()
  return math.max(1, tonumber(ARGV[3]) - server_now_ms())
end

-- The answer a release request already got, kept under its latch key, if any: a number, or
-- 'h<token>' for a release that handed the lock on ({2, token}). A copy of a release that
-- comes after its deadline and finds no answer is refused (an error starting with
-- REDLEASE_LATE and the server's time): held up in the network past every resend of it, it
-- must not take away levels its holder has taken since.
local function earlier_answer(latch)
  local answered = redis.call('get', latch)
  if not answered then
    local now = server_now_ms()
    if now > tonumber(ARGV[#ARGV]) then
      return refused_late(now, 'the release')
    end
    return nil
  end
  if string.sub(answered, 1, 1) == 'h' then
    return {2, tonumber(string.sub(answered, 2))}
  end
  return tonumber(answered)
end

-- Gives the lock whose holder (field `from`) releases its last level, and holds nothing else
-- of it, to the field `next` (a chain waiting in the holder's process), with a lease of
-- `lease_ms` and a fresh fencing token from `token_key`; answers {2, token}, kept under
-- `latch` for a retried request. Nothing is published: nobody else may take
-- the lock.
local function hand_over(from, next, lease_ms, token_key, latch)
  local token = redis.call('incr', token_key)
  redis.call('hdel', KEYS[1], from)
  redis.call('hset', KEYS[1], next, 1)
  redis.call('pexpire', KEYS[1], lease_ms)
  redis.call('set', latch, 'h' .. string.format('%d', token), 'px', latch_ms())
  return {2, token}
end

-- Keeps `left` (more than none) levels of the hash field `field`, with at least `lease_ms`
-- left on the lock (the remaining levels keep at least the lease they had), and answers 0,
-- kept under `latch` for a retried request.
local function keep_levels(field, left, lease_ms, latch)
  redis.call('hset', KEYS[1], field, left)
  if redis.call('pttl', KEYS[1]) < tonumber(lease_ms) then
    redis.call('pexpire', KEYS[1], lease_ms)
  end
  redis.call('set', latch, 0, 'px', latch_ms())
  return 0
end


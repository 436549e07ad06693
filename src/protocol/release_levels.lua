-- Helpers of the release scripts of the reentrant locks (lock, fair lock, write and read
-- locks), whose hash is KEYS[1].

-- The answer a release request already got, kept under its latch key, if any.
local function earlier_answer(latch)
  local answered = redis.call('get', latch)
  return answered and tonumber(answered)
end

-- Keeps `left` (more than none) levels of the hash field `field`, with at least `lease_ms`
-- left on the lock (the remaining levels keep at least the lease they had), and answers 0,
-- kept under `latch` for `latch_ms` for a retried request.
local function keep_levels(field, left, lease_ms, latch, latch_ms)
  redis.call('hset', KEYS[1], field, left)
  if redis.call('pttl', KEYS[1]) < tonumber(lease_ms) then
    redis.call('pexpire', KEYS[1], lease_ms)
  end
  redis.call('set', latch, 0, 'px', latch_ms)
  return 0
end


-- Helpers of the acquire scripts of the reentrant locks (lock, fair lock, write lock), whose
-- hash is KEYS[1]; `token_key` is the lock name's fencing token counter.

-- The counter's value (a multi-server lock may have raised it), started if absent.
local function current_token(token_key)
  return tonumber(redis.call('get', token_key)) or redis.call('incr', token_key)
end

-- One more level of the chain `field` holds, which held `levels_held` levels: answers
-- {2, token}. The count is set to one more than the levels held, not incremented, so that a
-- repeat of the same try (its first answer was lost) adds no second level. A reentrant level
-- never shortens the lease the outer levels have.
local function enter_again(field, lease_ms, token_key, levels_held)
  local token = current_token(token_key)
  redis.call('hset', KEYS[1], field, tonumber(levels_held) + 1)
  if redis.call('pttl', KEYS[1]) < tonumber(lease_ms) then
    redis.call('pexpire', KEYS[1], lease_ms)
  end
  return {2, token}
end

-- A new chain whose own field is here already: an earlier send of this same acquisition ran
-- (its connection broke and it was sent again), so it is this one. Answers {1, token}.
local function taken_before(field, lease_ms, token_key)
  redis.call('hset', KEYS[1], field, 1)
  redis.call('pexpire', KEYS[1], lease_ms)
  return {1, current_token(token_key)}
end


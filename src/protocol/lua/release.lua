-- Releases one level of a holder's lock (see lock_give.lua for its keys, arguments and
-- answers); or, when this is the last level and ARGV[6] names a chain of the holder's
-- process that waits for the lock, hands the lock to that chain instead of freeing it.
-- KEYS[4]: the fencing token counter of the lock name
-- ARGV[6]: the holder id of the chain to hand the lock to ('': none)
-- ARGV[7]: the lease that chain asked for, in ms
-- Answers as lock_give.lua, or {2, fencing token} when it handed the lock on.
if ARGV[6] ~= '' and ARGV[5] == '0' then
  local answered = earlier_answer(KEYS[3])
  if answered then
    return answered
  end
  if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
    return hand_over(ARGV[1], ARGV[6], ARGV[7], KEYS[4], KEYS[3])
  end
end
return give_lock()

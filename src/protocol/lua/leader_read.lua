-- Reads an election's leader and where its change log ends, in one step.
-- KEYS[1]: the election's lock hash
-- KEYS[2]: the leader record
-- KEYS[3]: the change log
-- Answers {last log id or '', holder, value, term, since}, the last four only while the
-- holder on record still holds the lock (a leader that died or was freed by force is not
-- the leader, though its record stays until the next one).
local last = redis.call('xrevrange', KEYS[3], '+', '-', 'COUNT', 1)
local answer = {last[1] and last[1][1] or ''}
local leader = redis.call('hmget', KEYS[2], 'holder', 'value', 'term', 'since')
if leader[1] and redis.call('hexists', KEYS[1], leader[1]) == 1 then
  for i = 1, 4 do
    answer[i + 1] = leader[i]
  end
end
return answer

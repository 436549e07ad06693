-- Announces a candidate as the leader of an election, once it holds the election's lock and
-- its guard exists (the lock is taken as any lock's, by acquire.lua): recorded, logged and
-- announced on the election's channel, with its term (the fencing token of its lock).
-- KEYS[1]: the election's lock hash
-- KEYS[2]: the leader record (a hash: holder, value, term, since)
-- KEYS[3]: the change log (a stream, trimmed to about ARGV[4] entries)
-- KEYS[4]: the election's channel, where every change is announced with its term
-- ARGV[1]: the candidate's holder id
-- ARGV[2]: its value
-- ARGV[3]: its term
-- ARGV[4]: how many changes the log keeps, about
-- Answers 1 when the candidate leads (announced now, or by an earlier send of the same
-- announcement), 0 when it does not hold the lock: nothing is announced then. So a copy of
-- the announcement that comes late, after the hold ended, announces nothing; and a campaign
-- whose caller gave up (its try ran late, and its undo after it) is never announced at all.
-- Read first: a record key of another type fails the call before anything is written.
local recorded = redis.call('hget', KEYS[2], 'holder')
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if recorded == ARGV[1] then
  return 1
end
local since = string.format('%d', server_now_ms())
redis.call('hset', KEYS[2], 'holder', ARGV[1], 'value', ARGV[2], 'term', ARGV[3],
  'since', since)
redis.call('xadd', KEYS[3], 'MAXLEN', '~', ARGV[4], '*', 'change', 'elected',
  'holder', ARGV[1], 'value', ARGV[2], 'term', ARGV[3], 'since', since)
redis.call(publish_command, KEYS[4], ARGV[3])
return 1

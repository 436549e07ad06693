-- A candidate's campaign in an election: takes the election's lock as the lock's acquire
-- script does (lock_take.lua: KEYS[1], KEYS[2], ARGV[1] to ARGV[3], and its answers); a new
-- leader (not an earlier send of the same campaign) is recorded, logged and announced.
-- KEYS[3]: the leader record (a hash: holder, value, term, since)
-- KEYS[4]: the change log (a stream, trimmed to about ARGV[5] entries)
-- KEYS[5]: the election's channel, where every change is announced with its term
-- ARGV[4]: the candidate's value
-- ARGV[5]: how many changes the log keeps, about
-- Read first: a record key of another type fails the call before the lock is taken.
local recorded = redis.call('hget', KEYS[3], 'holder')
local answer = take_lock()
if answer[1] == 1 and recorded ~= ARGV[2] then
  local time = redis.call('time')
  local since = time[1] .. string.format('%03d', math.floor(tonumber(time[2]) / 1000))
  local term = tostring(answer[2])
  redis.call('hset', KEYS[3], 'holder', ARGV[2], 'value', ARGV[4], 'term', term,
    'since', since)
  redis.call('xadd', KEYS[4], 'MAXLEN', '~', ARGV[5], '*', 'change', 'elected',
    'holder', ARGV[2], 'value', ARGV[4], 'term', term, 'since', since)
  redis.call(publish_command, KEYS[5], term)
end
return answer

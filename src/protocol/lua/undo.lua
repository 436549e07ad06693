-- Takes back an acquisition whose answer never reached the holder: whatever it added is
-- removed, and the levels the holder's process knows it holds stay.
-- KEYS[1]: the lock hash
-- KEYS[2]: the release channel of the lock name
-- ARGV[1]: the holder id
-- ARGV[2]: how many levels of the lock the holder's process holds
-- ARGV[3]: the release message
-- Answers 1 when it freed the lock, else 0.
-- It is sent on the connection of the acquisition it undoes, behind it (or after that
-- connection broke), so it runs after that acquisition if that ever runs, and before any
-- later request of the same holder. A key of another type is left alone.
local count = redis.pcall('hget', KEYS[1], ARGV[1])
if type(count) ~= 'string' then
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
redis.call(publish_command, KEYS[2], ARGV[3])
return 1

-- Asks every holder of a lock to let go: one notice per holder on the notice channel,
-- 'revoke <holder id> <lock name>', and nothing else. Cooperative: each holder decides.
-- KEYS[1]: the lock hash, of any kind (a lock, a fair lock, a read-write lock, a leadership)
-- ARGV[1]: the channel of notices
-- Answers how many holds were asked (0 when the lock is free). A holder is a field whose
-- value is a count (a reader, a writer '<holder id>:write', a lock's holder), not 'mode' or
-- 'upgrader'.
local fields = redis.call('hgetall', KEYS[1])
local asked = 0
for i = 1, #fields, 2 do
  if tonumber(fields[i + 1]) then
    local holder = string.gsub(fields[i], ':write$', '')
    redis.call('publish', ARGV[1], 'revoke ' .. holder .. ' ' .. KEYS[1])
    asked = asked + 1
  end
end
return asked

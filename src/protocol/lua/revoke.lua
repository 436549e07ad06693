-- Asks the holders of a lock that keep an acquisition out to let go: one notice per holder
-- on the notice channel, 'revoke <holder id> <lock name>', and nothing else. Cooperative:
-- each holder decides.
-- KEYS[1]: the lock hash, of any kind (a lock, a fair lock, a read-write lock, a leadership)
-- ARGV[1]: the channel of notices
-- ARGV[2]: whom: 'all' the holders, the 'writer' alone (what keeps a reader out), or the
--          writer and the upgradable reader ('upgrade': what keeps an upgradable reader out)
-- ARGV[3]: a holder id to leave out ('' for none): an upgrade's own upgradable read
-- Answers how many holds were asked (0 when none). A holder is a field whose value is a
-- count (a reader, a writer '<holder id>:write', a lock's holder), not 'mode', 'upgrader' or
-- 'upgrading'.
local fields = redis.call('hgetall', KEYS[1])
local upgrader = redis.call('hget', KEYS[1], 'upgrader')
local asked = 0
for i = 1, #fields, 2 do
  if tonumber(fields[i + 1]) then
    local holder, writes = string.gsub(fields[i], ':write$', '')
    local whom = ARGV[2] == 'all' or writes > 0 or (ARGV[2] == 'upgrade' and fields[i] == upgrader)
    if whom and holder ~= ARGV[3] then
      redis.call('publish', ARGV[1], 'revoke ' .. holder .. ' ' .. KEYS[1])
      asked = asked + 1
    end
  end
end
return asked

-- A helper of the read-write lock's release scripts.
-- How long the longest read level of the lock KEYS[1] has left, in ms (0 when none): reader
-- r's level n has the timeout key '<prefix><r>:rwlock_timeout:<n>'. Readers whose levels all
-- ran out (they died) count for nothing.
local function longest_read_level(prefix)
  local longest = 0
  local fields = redis.call('hgetall', KEYS[1])
  for i = 1, #fields, 2 do
    local count = tonumber(fields[i + 1])
    if fields[i] ~= 'mode' and count then
      for level = 1, count do
        local key = prefix .. fields[i] .. ':rwlock_timeout:' .. level
        longest = math.max(longest, redis.call('pttl', key))
      end
    end
  end
  return longest
end


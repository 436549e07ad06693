-- Helpers of the read-write lock's scripts that judge its readers.
-- Reader r's level n of the lock KEYS[1] has the timeout key
-- '<prefix><r>:rwlock_timeout:<n>'. Readers whose levels all ran out (they died) count for
-- nothing.

-- How long the longest of the `count` levels of `reader` has left, in ms (0 when none).
local function levels_left(prefix, reader, count)
  local longest = 0
  for level = 1, count do
    local key = prefix .. reader .. ':rwlock_timeout:' .. level
    longest = math.max(longest, redis.call('pttl', key))
  end
  return longest
end

-- How long the longest level of `reader` has left, in ms (0 when none).
local function reader_level_left(prefix, reader)
  return levels_left(prefix, reader, tonumber(redis.call('hget', KEYS[1], reader)) or 0)
end

-- How long the longest read level of the lock has left, in ms (0 when none), leaving out
-- the reader `except` (nil: none).
local function longest_read_level(prefix, except)
  local longest = 0
  local fields = redis.call('hgetall', KEYS[1])
  for i = 1, #fields, 2 do
    local count = tonumber(fields[i + 1])
    if fields[i] ~= except and count then
      longest = math.max(longest, levels_left(prefix, fields[i], count))
    end
  end
  return longest
end

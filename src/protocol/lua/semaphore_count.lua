-- The start of every semaphore script: reading a permit count.
-- A semaphore is a string under its name: the number of permits available (Redisson's
-- layout; an absent key has none).
-- The largest count kept: integers beyond it are not exact in Lua's numbers.
local MAX_COUNT = 9007199254740991
-- The count under `key`, or nil when the key is absent. A key of another type fails with
-- Redis's WRONGTYPE; so does a string that is not an integer count, so that a caller meets one
-- error for "this name is taken by something else". Scripts read the count before their first
-- write, so such a failure leaves everything as it was.
local function read_count(key)
  local value = redis.call('get', key)
  if not value then
    return nil
  end
  if string.len(value) > 17 or not string.match(value, '^%-?%d+$')
      or math.abs(tonumber(value)) > MAX_COUNT then
    error({err = 'WRONGTYPE the key does not hold a permit count'})
  end
  return tonumber(value)
end
-- A count as Redis takes it: digits, never an exponent.
local function text(count)
  return string.format('%d', count)
end

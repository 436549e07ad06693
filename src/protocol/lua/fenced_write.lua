-- Writes a value only for a writer whose fencing token is at least the highest seen so far.
-- KEYS[1]: the value
-- KEYS[2]: the highest fencing token that wrote the value (kept after a delete, so that a
--          stale writer cannot bring a deleted value back)
-- ARGV[1]: the writer's fencing token, in decimal without leading zeros
-- ARGV[2]: 'set' or 'del'
-- ARGV[3]: the new value, for 'set'
-- Answers {1, token} when the write was done, {0, highest token seen} when it was refused,
-- an error starting with WRONGTYPE when the value's key holds something else than a string.
-- Tokens are compared as decimal strings (shorter is smaller, then by character), not as Lua
-- numbers, which are doubles and would blur tokens above 2^53.
local function lower(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end
-- A value key of another type is refused, before anything is written (GET refuses it too).
local kind = redis.call('type', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then
  return redis.error_reply('WRONGTYPE the fenced value is a key of another type')
end
local highest = redis.call('get', KEYS[2]) or '0'
local token = ARGV[1]
if lower(token, highest) then
  return {0, highest}
end
if lower(highest, token) then
  redis.call('set', KEYS[2], token)
end
if ARGV[2] == 'set' then
  redis.call('set', KEYS[1], ARGV[3])
else
  redis.call('del', KEYS[1])
end
return {1, token}

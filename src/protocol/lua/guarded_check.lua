-- The start of a guarded write's body (after request_begin.lua): the write runs only while
-- the hold is current. Its last two keys are the lock's hash and the request's key, its last
-- three arguments the hold's field in that hash and the request's deadline and keeping (see
-- request_end.lua). A holder that is gone (the lock expired, was freed by force, or is held
-- by another chain) finds no field: nothing is written, and the answer is {0}.
local lock, field = KEYS[#KEYS - 1], ARGV[#ARGV - 2]
if redis.call('hexists', lock, field) == 0 then
  return {0}
end

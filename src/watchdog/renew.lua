-- Extends the leases of many locks at once, each only while its holder still holds it.
-- KEYS[i]: a lock hash
-- ARGV[1]: the lease in milliseconds
-- ARGV[i + 1]: the holder id expected in KEYS[i]
-- Answers a list with, for each key, 1 when it was renewed and 0 when the holder is gone.
local renewed = {}
for i, key in ipairs(KEYS) do
  if redis.call('hexists', key, ARGV[i + 1]) == 1 then
    redis.call('pexpire', key, ARGV[1])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed

-- Extends the leases of many locks at once, each only while its holder still holds it.
-- KEYS[i]: a lock hash
-- ARGV[1]: the lease in milliseconds
-- ARGV[i + 1]: the holder id expected in KEYS[i]
-- Answers a list with, for each key, 1 when the holder still holds it and 0 when it is gone.
-- Each lock is judged on its own: a key overwritten with another type reads as gone, and does
-- not fail the renewal of the others in the batch.
-- A lease longer than ARGV[1] (a reentrant level with a long fixed lease) is not shortened.
local lease = tonumber(ARGV[1])
local renewed = {}
for i, key in ipairs(KEYS) do
  if redis.pcall('hexists', key, ARGV[i + 1]) == 1 then
    if redis.call('pttl', key) < lease then
      redis.call('pexpire', key, lease)
    end
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed

-- Extends the leases of many holds at once, each only while its holder still has it.
-- KEYS[i]: the key of hold i: a lock hash, or a permit semaphore's timeout zset
-- ARGV[1]: the lease in milliseconds
-- ARGV[3i - 1], ARGV[3i], ARGV[3i + 1]: hold i's kind, field and extra argument:
--   'field',  <hash field>, delay   a lock, fair lock or write lock: the field must exist; the
--                                   hash's TTL is the lease and the lock delay in ms ('' for
--                                   none: kept that long from others after a lost holder);
--   'read',   <holder id>,  prefix  a reader: its field must exist, and each of its levels
--                                   has a timeout key '<prefix>:<level>' renewed with it;
--   'permit', <permit id>,  ''      a permit: its expiry score must lie in the future.
-- Answers a list with, for each hold, 1 when its holder still has it and 0 when it is gone.
-- Each hold is judged on its own: a key overwritten with another type reads as gone, and does
-- not fail the renewal of the others in the batch.
-- A lease longer than ARGV[1] (a reentrant level with a long fixed lease) is not shortened.
local lease = tonumber(ARGV[1])
local now
local function extend(key, ttl)
  if redis.call('pttl', key) < ttl then
    redis.call('pexpire', key, ttl)
  end
end
local renewed = {}
for i, key in ipairs(KEYS) do
  local kind, field, extra = ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1]
  renewed[i] = 0
  if kind == 'permit' then
    local score = redis.pcall('zscore', key, field)
    if type(score) == 'string' then
      if now == nil then
        now = server_now_ms()
      end
      if tonumber(score) > now then
        redis.call('zadd', key, 'XX', now + lease, field)
        renewed[i] = 1
      end
    end
  else
    local count = redis.pcall('hget', key, field)
    if type(count) == 'string' then
      if kind == 'read' then
        extend(key, lease)
        for level = 1, tonumber(count) do
          extend(extra .. ':' .. level, lease)
        end
      else
        extend(key, lease + (tonumber(extra) or 0))
      end
      renewed[i] = 1
    end
  end
end
return renewed

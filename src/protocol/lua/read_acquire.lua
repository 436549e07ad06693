-- Takes a read lock of a read-write lock for a new chain, or enters it once more. Readers
-- share the lock; the thread that holds the write lock may read too (by a chain of its own,
-- whose holder id no later read of the thread shares), and the mode stays 'write'
-- meanwhile.
-- KEYS[1]: the read-write lock hash
-- KEYS[2]: the fencing token counter of the lock name
-- ARGV[1]: the lease in milliseconds
-- ARGV[2]: the reader's field (its holder id)
-- ARGV[3]: how many levels of the chain the holder's process holds ('0': a new chain)
-- ARGV[4]: the prefix of the reader's timeout keys: level n has '<prefix>:<n>', whose TTL is
--          that level's lease
-- ARGV[5]: the field of the write lock the reader's thread holds ('<holder id>:write'), whose
--          holder may read beside it ('': none)
-- Answers as the lock's acquire script: {1, token}, {2, token}, {0, PTTL} or {3, 0}.
local mode = redis.call('hget', KEYS[1], 'mode')
local may_start = readers_may_enter(mode, ARGV[5])
return enter_reading(mode, may_start, ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[1]))
